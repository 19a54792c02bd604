//! A machine short of CPU, as a compile beside the cluster makes it: busy
//! processes, two per core, until dropped.

use std::process::{Child, Command, Stdio};

pub struct CpuHogs(Vec<Child>);

impl CpuHogs {
    pub fn start() -> CpuHogs {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        CpuHogs(
            (0..cores * 2)
                .map(|_| {
                    Command::new("yes")
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("yes runs")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}
