//! Client calls of the system group: machine information, metrics,
//! environment, listening ports and installed packages.

use std::collections::BTreeMap;

use abx_wire::api::{
    EnvSetRequest, EnvUpdated, EnvVariables, ListeningPort, PackageList, PortList, SystemInfo, SystemMetrics,
};

use super::{Client, ClientError};

impl Client {
    /// `GET /system/info`: operating system, CPUs, memory, disk, cgroup limits.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let info = client.system_info().await?;
    /// println!("{} CPUs", info.cpu_count);
    /// # Ok(()) }
    /// ```
    pub async fn system_info(&self) -> Result<SystemInfo, ClientError> {
        self.call("system_info", &[], &[], None::<&()>).await
    }

    /// `GET /system/metrics`: load, CPU, memory and disk use, cgroup use.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let metrics = client.system_metrics().await?;
    /// println!("{:?}", metrics.memory_percent);
    /// # Ok(()) }
    /// ```
    pub async fn system_metrics(&self) -> Result<SystemMetrics, ClientError> {
        self.call("system_metrics", &[], &[], None::<&()>).await
    }

    /// `GET /env`: the variables children start with that the caller may
    /// see, only `names` when not empty.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let vars = client.env(&["PATH", "LANG"]).await?;
    /// println!("{:?}", vars.get("PATH"));
    /// # Ok(()) }
    /// ```
    pub async fn env(&self, names: &[&str]) -> Result<BTreeMap<String, String>, ClientError> {
        let query = if names.is_empty() { Vec::new() } else { vec![("filter", names.join(","))] };
        let answer: EnvVariables = self.call("env_get", &[], &query, None::<&()>).await?;
        Ok(answer.variables)
    }

    /// `POST /env`: sets variables for every child started from now on;
    /// returns the names set, sorted.
    ///
    /// # Errors
    /// Transport errors and refusals (`env_invalid`, `env_var_denied`,
    /// `env_var_not_allowed`, protected variables).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let set = client.set_env([("CI", "1"), ("RUST_LOG", "info")]).await?;
    /// assert_eq!(set, ["CI", "RUST_LOG"]);
    /// # Ok(()) }
    /// ```
    pub async fn set_env<K: Into<String>, V: Into<String>>(
        &self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Vec<String>, ClientError> {
        let answer: EnvUpdated = self.call("env_set", &[], &[], Some(&EnvSetRequest::new(vars))).await?;
        Ok(answer.updated)
    }

    /// `GET /ports`: listening TCP sockets.
    ///
    /// # Errors
    /// Transport errors and error answers.
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let serving = client.ports().await?.iter().any(|p| p.port == 8000);
    /// # let _ = serving; Ok(()) }
    /// ```
    pub async fn ports(&self) -> Result<Vec<ListeningPort>, ClientError> {
        let answer: PortList = self.call("ports", &[], &[], None::<&()>).await?;
        Ok(answer.listening)
    }

    /// `GET /packages`: installed packages of `manager` (`pip`, `npm`, `dpkg`).
    ///
    /// # Errors
    /// Transport errors and error answers (an unknown manager is a 400).
    ///
    /// ```no_run
    /// # async fn demo(client: abx_client::Client) -> Result<(), abx_client::ClientError> {
    /// let pip = client.packages("pip").await?;
    /// println!("{} Python packages", pip.packages.len());
    /// # Ok(()) }
    /// ```
    pub async fn packages(&self, manager: &str) -> Result<PackageList, ClientError> {
        self.call("packages", &[], &[("manager", manager.to_string())], None::<&()>).await
    }
}
