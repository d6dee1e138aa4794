"""Validate the Kubernetes manifests of templates/kubernetes offline.

Core kinds (Pod, Service, ...) are checked strictly (unknown fields refused)
against the Kubernetes JSON schemas that `kubernetes-validate` bundles. A
`Sandbox` of kubernetes-sigs/agent-sandbox (a custom resource, no bundled
schema) is checked for the fields its CRD declares, and its pod template is
validated strictly as a Pod. Then every container that runs the daemon must
keep the template's promises: /health probes on the API port, the token from a
Secret, CPU and memory limits, and no service-account token mounted.

Usage: python validate_k8s.py FILE.yaml...   (exit 0 when every file is valid)
"""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml
from kubernetes_validate import utils as kv

#: Fields of `Sandbox.spec` and of its pod template in agents.x-k8s.io/v1alpha1.
SANDBOX_SPEC_KEYS = {"podTemplate", "replicas", "shutdownPolicy", "shutdownTime", "volumeClaimTemplates"}
POD_TEMPLATE_KEYS = {"metadata", "spec"}
POD_TEMPLATE_METADATA_KEYS = {"labels", "annotations"}

API_PORT = 9000
#: A resource quantity ("250m", "1Gi", "1"), as the API server parses it.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


def pod_specs(doc: dict[str, Any], version: str, where: str) -> list[dict[str, Any]]:
    """Validates one document against its schema; returns the pod specs it holds."""
    kind = doc.get("kind")
    if kind == "Sandbox":
        if doc.get("apiVersion") != "agents.x-k8s.io/v1alpha1":
            raise ValueError(f"{where}: Sandbox apiVersion must be agents.x-k8s.io/v1alpha1")
        spec = doc.get("spec") or {}
        check_keys(spec, SANDBOX_SPEC_KEYS, f"{where}: spec")
        template = spec.get("podTemplate")
        if not isinstance(template, dict) or "spec" not in template:
            raise ValueError(f"{where}: spec.podTemplate.spec is required")
        check_keys(template, POD_TEMPLATE_KEYS, f"{where}: spec.podTemplate")
        metadata = template.get("metadata", {})
        check_keys(metadata, POD_TEMPLATE_METADATA_KEYS, f"{where}: spec.podTemplate.metadata")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": doc["metadata"]["name"], **metadata},
            "spec": template["spec"],
        }
        kv.validate(pod, version, strict=True)
        return [template["spec"]]
    kv.validate(doc, version, strict=True)
    return [doc["spec"]] if kind == "Pod" else []


def check_keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(obj) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}; allowed: {sorted(allowed)}")


def check_promises(spec: dict[str, Any], where: str) -> None:
    """The operational promises the template README makes about each sandbox pod."""
    if spec.get("automountServiceAccountToken") is not False:
        raise ValueError(f"{where}: automountServiceAccountToken must be false (the workload is untrusted)")
    for container in spec["containers"]:
        name = f"{where}: container {container['name']}"
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        if ports.get("api") != API_PORT:
            raise ValueError(f"{name}: needs a port named 'api' = {API_PORT}")
        for probe in ("readinessProbe", "livenessProbe"):
            get = container.get(probe, {}).get("httpGet", {})
            if get.get("path") != "/health" or get.get("port") not in ("api", API_PORT):
                raise ValueError(f"{name}: {probe} must GET /health on the API port")
        token = [e for e in container.get("env", []) if e["name"] == "ABX_SERVER_TOKEN"]
        if not token or "secretKeyRef" not in token[0].get("valueFrom", {}):
            raise ValueError(f"{name}: ABX_SERVER_TOKEN must come from a Secret (valueFrom.secretKeyRef)")
        resources = container.get("resources", {})
        if not {"cpu", "memory"} <= set(resources.get("limits", {})):
            raise ValueError(f"{name}: resources.limits needs cpu and memory")
        for section in ("requests", "limits"):
            for resource, quantity in resources.get(section, {}).items():
                if not QUANTITY.match(str(quantity)):
                    raise ValueError(f"{name}: resources.{section}.{resource}: {quantity!r} is not a quantity")


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    version = kv.latest_version()
    failures = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for index, doc in enumerate(docs):
            where = f"{path}[{index}] {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                for spec in pod_specs(doc, version, where):
                    check_promises(spec, where)
            except kv.ValidationError as e:
                failures += 1
                location = ".".join(str(p) for p in e.absolute_path) or "(root)"
                print(f"FAIL {where}: {location}: {e.message}")
            except ValueError as e:
                failures += 1
                print(f"FAIL {e}")
            except (kv.SchemaNotFoundError, KeyError) as e:
                failures += 1
                print(f"FAIL {where}: {getattr(e, 'message', repr(e))}")
            else:
                print(f"ok   {where} (Kubernetes {version}, strict)")
        if not docs:
            failures += 1
            print(f"FAIL {path}: no Kubernetes documents")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
