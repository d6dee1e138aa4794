# syntax=docker/dockerfile:1
#
# agent-sandbox-server base image: a static (musl) release build of the daemon
# on a small Debian runtime with a non-root `user` (home /home/user).
#
#   docker build -t agent-sandbox-server .
#   docker run --rm -p 9000:9000 -e ABX_SERVER_TOKEN=change-me agent-sandbox-server
#
# The start and ready commands are the reference server's base-image contract
# (`agent-sandbox-server serve --port 9000`, `agent-sandbox-server healthcheck
# --port 9000`), so a platform that runs the Python server needs no change.
# There is no init wrapper: the daemon reaps zombies itself when it is PID 1.
# Templates copy the binary from this image: see templates/.

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- build: a static binary for the builder's own architecture --------------
FROM ${RUST_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# musl-tools: the C compiler for mimalloc, the static build's allocator.
# Debian's stable point releases only take fixes, so the package is not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "$(uname -m)-unknown-linux-musl"
# The whole context (.dockerignore leaves out what the build does not read),
# so files the crate embeds at build time are there wherever they live.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
    && cargo build --release --locked --target "$target" --bin agent-sandbox-server \
    && install -D -m 0755 "target/$target/release/agent-sandbox-server" /out/agent-sandbox-server \
    && /out/agent-sandbox-server version

# ---- runtime -----------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# /etc/agent-sandbox holds server.toml and server-policy.json when a template
# adds them (both are read at start when present). The agents group's state
# (webhook secrets, environment values, session journals) lives outside the
# base directory (/home/user), so no file endpoint's root contains it.
RUN useradd --create-home --home-dir /home/user --uid 1000 --user-group --shell /bin/bash user \
    && mkdir -p /etc/agent-sandbox \
    && install -d -o 1000 -g 1000 -m 0700 /var/lib/agent-sandbox /var/lib/agent-sandbox/agents
COPY --from=build /out/agent-sandbox-server /usr/local/bin/agent-sandbox-server

LABEL org.opencontainers.image.title="agent-sandbox-server" \
      org.opencontainers.image.description="In-sandbox agent server daemon (HTTP API 9000, PTY WebSocket 9001)" \
      org.opencontainers.image.licenses="Apache-2.0"

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 1000:1000
WORKDIR /home/user
ENV HOME=/home/user \
    ABX_AGENTS_STATE_DIR=/var/lib/agent-sandbox/agents

# 9000: HTTP API; 9001: PTY WebSocket; 49983: envd data plane (E2B SDK); 49999: code interpreter.
EXPOSE 9000 9001 49983 49999

HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["agent-sandbox-server", "healthcheck", "--port", "9000"]

# SIGTERM (the default stop signal) lets in-flight requests finish, stops the
# children the daemon started, and exits 0.
CMD ["agent-sandbox-server", "serve", "--port", "9000"]
