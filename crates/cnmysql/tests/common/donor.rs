//! `cnmysql donor` beside a source cluster's only server, as a user would
//! run it on the old server's host: the server's own certificate and CA,
//! its address and option file, a token. Killed when dropped.

use std::path::{Path, PathBuf};

use super::{BIN, LocalCluster};

/// The token the donors of the tests are given.
pub const DONOR_TOKEN: &str = "donor-token-0123456789abcdef";

pub struct DonorProcess {
    child: std::process::Child,
    pub port: u16,
    work: tempfile::TempDir,
}

impl DonorProcess {
    pub fn start(source: &LocalCluster, instance: &str) -> DonorProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pki = Path::new(&source.state_arg()).join("pki");
        let run = source.instance_dir(instance).join("run");
        let work = tempfile::tempdir().unwrap();
        let token = work.path().join("token");
        std::fs::write(&token, DONOR_TOKEN).unwrap();
        let child = std::process::Command::new(BIN)
            .arg("donor")
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!(
                "--tls-cert={}",
                pki.join(format!("{instance}.crt")).display()
            ))
            .arg(format!(
                "--tls-key={}",
                pki.join(format!("{instance}.key")).display()
            ))
            .arg(format!("--token-file={}", token.display()))
            .arg(format!(
                "--server=127.0.0.1:{}",
                source.instance_port(instance)
            ))
            .arg(format!("--server-ca={}", pki.join("ca.crt").display()))
            .arg(format!("--server-cnf={}", run.join("my.cnf").display()))
            .arg(format!("--work-dir={}", work.path().join("work").display()))
            .stderr(std::fs::File::create(work.path().join("donor.log")).unwrap())
            .spawn()
            .unwrap();
        DonorProcess { child, port, work }
    }

    /// What the donor logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.work.path().join("donor.log")
    }
}

impl Drop for DonorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
