//! A real Kubernetes control plane for tests, started the envtest way: the
//! directory named by `KUBEBUILDER_ASSETS` holds `etcd`, `kube-apiserver`
//! and `kube-controller-manager`; each test gets its own instance of them on
//! free loopback ports, with a fresh certificate authority, a data directory
//! that is removed afterwards, and every process killed when it is dropped.
//!
//! Tests that use it are `#[ignore]`d with [`IGNORE_REASON`]-style reasons,
//! because no package registry ships these binaries; `scripts/test-kube`
//! runs them when `KUBEBUILDER_ASSETS` is set.

pub mod azure_blob;
pub mod object_store;
pub mod tools;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rcgen::KeyPair;

mod certs;
mod ports;
pub use ports::free_port;

/// What an ignored real-API test says about why it is ignored.
pub const IGNORE_REASON: &str = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube";

/// The directory of the control-plane binaries, from `KUBEBUILDER_ASSETS`.
pub fn assets() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("KUBEBUILDER_ASSETS")
        .map(PathBuf::from)
        .context("KUBEBUILDER_ASSETS is not set: point it at a directory holding etcd, kube-apiserver and kube-controller-manager")?;
    for bin in ["etcd", "kube-apiserver"] {
        if !dir.join(bin).is_file() {
            bail!(
                "KUBEBUILDER_ASSETS={}: {bin} is missing there",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// Options for [`ControlPlane::start`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Also run kube-controller-manager with these controllers (e.g.
    /// `garbagecollector`, `namespace`, `endpointslice`).
    pub controllers: Vec<String>,
    /// Write an audit log (`audit.log` in the data directory): one line per
    /// request, with the user who made it (for counting requests).
    pub audit: bool,
    /// Keep the data, logs, certificates and kubeconfig in this directory
    /// (created if missing, never removed) instead of a temporary one.
    pub dir: Option<PathBuf>,
    /// Serve on this address instead of 127.0.0.1 (a real node's Pods
    /// reach the API server there; it is also the advertised endpoint).
    pub address: Option<std::net::Ipv4Addr>,
    /// The ClusterIP range (default `10.96.0.0/16`).
    pub service_cidr: Option<String>,
    /// Users besides the administrator, as (name, group), each given a
    /// bearer token and a kubeconfig ([`ControlPlane::kubeconfig_of`]).
    pub users: Vec<(String, String)>,
    /// Real kubelets join: the Node authorizer and the NodeRestriction
    /// admission, and a client certificate for the API server's calls to
    /// kubelets (exec, logs, port-forward).
    pub nodes: bool,
    /// Also run kube-scheduler.
    pub scheduler: bool,
}

/// Where a control plane keeps its files.
enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Dir::Temp(t) => t.path(),
            Dir::Kept(p) => p,
        }
    }
}

/// One request from the audit log.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// A running etcd + kube-apiserver (+ kube-controller-manager).
pub struct ControlPlane {
    dir: Dir,
    children: Vec<(String, Child)>,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// A kubeconfig for an administrator (group `system:masters`).
    pub kubeconfig: PathBuf,
    /// The API server's serving CA (PEM).
    pub ca_pem: String,
    /// The administrator's bearer token (tests only; never logged by us).
    admin_token: String,
    /// The service-account signing key file (PEM), for tests that mint tokens.
    pub service_account_key: PathBuf,
}

fn token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

/// The child is killed when the process that started it dies, even by
/// SIGKILL (a test run stopped hard leaves no control plane behind).
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe; nothing else runs in the child
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

/// The first address of a ClusterIP range: the `kubernetes` Service's,
/// which the API server's certificate must name.
fn first_service_ip(cidr: &str) -> anyhow::Result<std::net::Ipv4Addr> {
    let base: std::net::Ipv4Addr = cidr
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("service CIDR {cidr}: not an IPv4 range"))?;
    Ok(std::net::Ipv4Addr::from(u32::from(base) + 1))
}

/// Write a kubeconfig for `url` with a bearer token.
pub fn write_kubeconfig(
    path: &Path,
    url: &str,
    ca_pem: &str,
    token: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let ca = base64(ca_pem.as_bytes());
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: envtest\n  user:\n    token: {token}\ncontexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: envtest\n    namespace: {namespace}\ncurrent-context: envtest\n"
    );
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log)?;
    let mut cmd = Command::new(program);
    die_with_parent(&mut cmd);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {name} ({})", program.display()))
}

/// The API server's flags that some options add: real kubelets joining
/// ([`Options::nodes`]) and the audit log ([`Options::audit`]).
fn optional_api_args(opts: &Options, d: &Path) -> anyhow::Result<Vec<String>> {
    let mut api_args = Vec::new();
    if opts.nodes {
        api_args.extend([
            "--enable-admission-plugins=NodeRestriction".into(),
            format!(
                "--kubelet-client-certificate={}",
                d.join("kubelet-client.crt").display()
            ),
            format!(
                "--kubelet-client-key={}",
                d.join("kubelet-client.key").display()
            ),
            "--kubelet-preferred-address-types=InternalIP".into(),
            "--endpoint-reconciler-type=lease".into(),
        ]);
    }
    if opts.audit {
        std::fs::write(
            d.join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n",
        )?;
        api_args.push(format!(
            "--audit-policy-file={}",
            d.join("audit-policy.yaml").display()
        ));
        api_args.push(format!(
            "--audit-log-path={}",
            d.join("audit.log").display()
        ));
    }
    Ok(api_args)
}

impl ControlPlane {
    /// Start etcd and kube-apiserver (and kube-controller-manager when
    /// controllers are asked for); returns once `/readyz` answers ok.
    pub async fn start(opts: Options) -> anyhow::Result<ControlPlane> {
        let assets = assets()?;
        let dir = match &opts.dir {
            Some(p) => {
                std::fs::create_dir_all(p)?;
                Dir::Kept(std::fs::canonicalize(p)?)
            }
            None => Dir::Temp(
                tempfile::Builder::new()
                    .prefix("cnmysql-envtest-")
                    .tempdir()?,
            ),
        };
        let d = dir.path();
        let mut cp = ControlPlane {
            children: Vec::new(),
            url: String::new(),
            kubeconfig: d.join("kubeconfig"),
            ca_pem: String::new(),
            admin_token: token(),
            service_account_key: d.join("sa.key"),
            dir,
        };
        let d = cp.dir.path().to_path_buf();

        // etcd
        let (client, peer) = (free_port(), free_port());
        let etcd_args: Vec<String> = vec![
            format!("--data-dir={}", d.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            "--log-level=warn".into(),
        ];
        let etcd = spawn(
            "etcd",
            &assets.join("etcd"),
            &etcd_args,
            &d.join("etcd.log"),
        )?;
        cp.children.push(("etcd".into(), etcd));

        // Certificates, tokens, service-account key.
        let address = opts.address.unwrap_or(std::net::Ipv4Addr::LOCALHOST);
        let service_cidr = opts
            .service_cidr
            .clone()
            .unwrap_or_else(|| "10.96.0.0/16".into());
        let (ca_pem, issuer) = certs::pem_ca()?;
        let (cert, key) = certs::serving_cert(
            &issuer,
            &[address.into(), first_service_ip(&service_cidr)?.into()],
        )?;
        if opts.nodes {
            let (cert, key) = certs::client_cert(
                &issuer,
                "kube-apiserver-kubelet-client",
                &["system:masters"],
            )?;
            std::fs::write(d.join("kubelet-client.crt"), cert)?;
            std::fs::write(d.join("kubelet-client.key"), key)?;
        }
        std::fs::write(d.join("ca.crt"), &ca_pem)?;
        std::fs::write(d.join("apiserver.crt"), cert)?;
        std::fs::write(d.join("apiserver.key"), key)?;
        let sa = KeyPair::generate()?;
        std::fs::write(&cp.service_account_key, sa.serialize_pem())?;
        std::fs::write(d.join("sa.pub"), sa.public_key_pem())?;
        let mut tokens = format!("{},admin,admin-uid,\"system:masters\"\n", cp.admin_token);
        let mut user_tokens = Vec::new();
        for (user, group) in &opts.users {
            let t = token();
            tokens.push_str(&format!("{t},{user},{user},\"{group}\"\n"));
            user_tokens.push((user.clone(), t));
        }
        std::fs::write(d.join("tokens.csv"), tokens)?;
        cp.ca_pem = ca_pem;

        let port = free_port();
        cp.url = format!("https://{address}:{port}");
        let api_args: Vec<String> = vec![
            format!("--etcd-servers=http://127.0.0.1:{client}"),
            format!("--etcd-prefix=/registry-{port}"),
            format!("--bind-address={address}"),
            format!("--advertise-address={address}"),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", d.join("apiserver.crt").display()),
            format!(
                "--tls-private-key-file={}",
                d.join("apiserver.key").display()
            ),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            if opts.nodes {
                "--authorization-mode=Node,RBAC".into()
            } else {
                "--authorization-mode=RBAC".into()
            },
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", d.join("sa.pub").display()),
            format!(
                "--service-account-signing-key-file={}",
                cp.service_account_key.display()
            ),
            format!("--service-cluster-ip-range={service_cidr}"),
            "--allow-privileged=true".into(),
            "--enable-priority-and-fairness=false".into(),
            format!("--cert-dir={}", d.join("certs").display()),
            "--v=1".into(),
        ];
        let mut api_args = api_args;
        api_args.extend(optional_api_args(&opts, &d)?);
        let api = spawn(
            "kube-apiserver",
            &assets.join("kube-apiserver"),
            &api_args,
            &d.join("kube-apiserver.log"),
        )?;
        cp.children.push(("kube-apiserver".into(), api));
        write_kubeconfig(
            &cp.kubeconfig,
            &cp.url,
            &cp.ca_pem,
            &cp.admin_token,
            "default",
        )?;
        for (user, t) in &user_tokens {
            write_kubeconfig(&cp.kubeconfig_of(user), &cp.url, &cp.ca_pem, t, "default")?;
        }
        cp.wait_ready(Duration::from_secs(90)).await?;

        cp.start_controllers(&opts, &assets)?;
        Ok(cp)
    }

    /// kube-controller-manager (when controllers are asked for) and
    /// kube-scheduler (when asked for).
    fn start_controllers(&mut self, opts: &Options, assets: &Path) -> anyhow::Result<()> {
        if !opts.controllers.is_empty() {
            let kcm = assets.join("kube-controller-manager");
            if !kcm.is_file() {
                bail!(
                    "KUBEBUILDER_ASSETS={}: kube-controller-manager is missing there",
                    assets.display()
                );
            }
            let args: Vec<String> = vec![
                format!("--kubeconfig={}", self.kubeconfig.display()),
                format!("--controllers={}", opts.controllers.join(",")),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--use-service-account-credentials=false".into(),
                "--concurrent-gc-syncs=5".into(),
                format!(
                    "--root-ca-file={}",
                    self.dir.path().join("ca.crt").display()
                ),
                format!(
                    "--service-account-private-key-file={}",
                    self.service_account_key.display()
                ),
                "--v=1".into(),
            ];
            let child = spawn(
                "kube-controller-manager",
                &kcm,
                &args,
                &self.dir.path().join("kube-controller-manager.log"),
            )?;
            self.children
                .push(("kube-controller-manager".into(), child));
        }
        if opts.scheduler {
            let args: Vec<String> = vec![
                format!("--kubeconfig={}", self.kubeconfig.display()),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ];
            let child = spawn(
                "kube-scheduler",
                &assets.join("kube-scheduler"),
                &args,
                &self.dir.path().join("kube-scheduler.log"),
            )?;
            self.children.push(("kube-scheduler".into(), child));
        }
        Ok(())
    }

    /// The kubeconfig of a user named in [`Options::users`].
    pub fn kubeconfig_of(&self, user: &str) -> PathBuf {
        self.dir
            .path()
            .join(format!("kubeconfig-{}", user.replace(':', "-")))
    }

    /// The data directory (logs of each process are `<name>.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let client = self.client().await?;
        loop {
            for (name, child) in self.children.iter_mut() {
                if let Some(st) = child.try_wait()? {
                    let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
                        .unwrap_or_default();
                    let tail: String = log
                        .lines()
                        .filter(|l| !l.contains("FLAG:"))
                        .rev()
                        .take(20)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n");
                    bail!("{name} exited ({st}) before the API server was ready:\n{tail}");
                }
            }
            let req = http::Request::get("/readyz").body(Vec::new())?;
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the API server was not ready within {timeout:?}; logs in {}",
                    self.dir.path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A client with administrator rights.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_for(&self.kubeconfig).await
    }

    /// A client from a kubeconfig file.
    pub async fn client_for(&self, kubeconfig: &Path) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A kubeconfig that authenticates with `token` (e.g. a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, name: &str, token: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("kubeconfig-{name}"));
        write_kubeconfig(&path, &self.url, &self.ca_pem, token, "default")?;
        Ok(path)
    }

    /// Requests made by `user` so far, from the audit log (see
    /// [`Options::audit`]), in the order the API server finished them.
    pub fn requests_by(&self, user: &str) -> Vec<Request> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["user"]["username"] == user)
            .map(|v| Request {
                verb: s(&v["verb"]),
                resource: s(&v["objectRef"]["resource"]),
                subresource: s(&v["objectRef"]["subresource"]),
                namespace: s(&v["objectRef"]["namespace"]),
                name: s(&v["objectRef"]["name"]),
            })
            .collect()
    }

    /// Run the real kubectl against this control plane as the
    /// administrator, with `stdin` as its input; its output, or an error
    /// with what it printed.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use std::io::Write as _;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl (is it installed?)")?;
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .context("kubectl's stdin")?
                .write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Lines of a control-plane process's log, for failure messages.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        // Controllers first, etcd last.
        for (_, child) in self.children.iter_mut().rev() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    _ if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        if std::env::var_os("CNMYSQL_ENVTEST_KEEP").is_some()
            && let Dir::Temp(t) = &mut self.dir
        {
            let kept = t.path().to_path_buf();
            eprintln!("envtest: keeping {}", kept.display());
            let _ =
                std::mem::replace(t, tempfile::Builder::new().tempdir().expect("tempdir")).keep();
        }
    }
}

/// Install every CRD of a file (documents separated by `---`) the way
/// `kubectl apply --server-side` does, and wait until each is established.
pub async fn install_crd(client: &kube::Client, path: &Path) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let crds: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in &crds {
        let name = crd.metadata.name.clone().context("a CRD has no name")?;
        api.patch(
            &name,
            &PatchParams::apply("cnmysql-test").force(),
            &Patch::Apply(crd),
        )
        .await?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("the CRD {name} was not established within 60s"))??;
    }
    Ok(())
}

/// Wait until `f` returns Some, or fail after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    until(what, timeout, f)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Poll `f` every 100 ms until it returns Some, or fail naming `what`.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
