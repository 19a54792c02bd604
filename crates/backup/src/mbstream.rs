//! Reading MariaDB's `mbstream` as it passes (the format of
//! `mariadb-backup --stream=mbstream`), to learn what a base backup is
//! consistent with without unpacking it: the content of its binlog info
//! file (`mariadb_backup_binlog_info`, or `xtrabackup_binlog_info` from
//! older versions), whose third field is the GTID position.
//!
//! A stream is a sequence of chunks: the magic `XBSTCK01`, a flags byte, a
//! type byte (`P` payload, `E` end of a file), the path length (u32, little
//! endian) and the path; a payload chunk then has its length (u64), its
//! offset in the file (u64), a CRC32 (u32) and the bytes.

const MAGIC: &[u8; 8] = b"XBSTCK01";
const WANTED: [&str; 2] = ["mariadb_backup_binlog_info", "xtrabackup_binlog_info"];

/// Fed the stream chunk by chunk; keeps the wanted files' bytes.
#[derive(Default)]
pub struct Scanner {
    buf: Vec<u8>,
    /// Bytes of the current payload still to skip or keep.
    remaining: u64,
    keeping: Option<String>,
    files: std::collections::BTreeMap<String, Vec<u8>>,
    error: Option<String>,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Feed the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        while self.error.is_none() {
            if self.remaining > 0 {
                // Payload: from what is buffered first, then from `data`.
                let from_buf = !self.buf.is_empty();
                let avail = if from_buf { self.buf.len() } else { data.len() };
                if avail == 0 {
                    return;
                }
                let n = (self.remaining as usize).min(avail);
                if let Some(f) = &self.keeping {
                    let bytes = if from_buf { &self.buf[..n] } else { &data[..n] };
                    self.files
                        .entry(f.clone())
                        .or_default()
                        .extend_from_slice(bytes);
                }
                if from_buf {
                    self.buf.drain(..n);
                } else {
                    data = &data[n..];
                }
                self.remaining -= n as u64;
                continue;
            }
            self.buf.extend_from_slice(data);
            data = &[];
            if !self.header() {
                return;
            }
        }
    }

    /// Parse one whole header from the buffer, if it holds one.
    fn header(&mut self) -> bool {
        let b = &self.buf;
        if b.len() < 14 {
            return false;
        }
        if &b[..8] != MAGIC {
            self.error = Some("not an mbstream (no chunk magic where one belongs)".into());
            return false;
        }
        let kind = b[9];
        let path_len = u32::from_le_bytes([b[10], b[11], b[12], b[13]]) as usize;
        let fixed = 14 + path_len;
        let header = match kind {
            b'E' => fixed,
            b'P' => fixed + 20,
            other => {
                self.error = Some(format!(
                    "mbstream chunk of unknown type {:?}",
                    other as char
                ));
                return false;
            }
        };
        if b.len() < header {
            return false;
        }
        if kind == b'P' {
            let path = String::from_utf8_lossy(&b[14..fixed]).into_owned();
            self.remaining = u64::from_le_bytes(b[fixed..fixed + 8].try_into().expect("8 bytes"));
            let name = path.rsplit('/').next().unwrap_or(&path);
            self.keeping = WANTED.contains(&name).then(|| name.to_string());
        }
        self.buf.drain(..header);
        true
    }

    /// The GTID position the backup is consistent with, once the stream has
    /// been read whole; why not otherwise.
    pub fn gtid(&self) -> Result<String, String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let text = WANTED
            .iter()
            .find_map(|w| self.files.get(*w))
            .ok_or_else(|| {
                "the stream holds no binlog info file: was binary logging on?".to_string()
            })?;
        let text = String::from_utf8_lossy(text);
        // File, position, GTID position; a server that has logged no
        // transaction yet has none: the backup starts the history.
        Ok(text
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: u8, path: &str, payload: &[u8]) -> Vec<u8> {
        let mut c = MAGIC.to_vec();
        c.push(0);
        c.push(kind);
        c.extend_from_slice(&(path.len() as u32).to_le_bytes());
        c.extend_from_slice(path.as_bytes());
        if kind == b'P' {
            c.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            c.extend_from_slice(&0u64.to_le_bytes());
            c.extend_from_slice(&0u32.to_le_bytes());
            c.extend_from_slice(payload);
        }
        c
    }

    #[test]
    fn the_gtid_is_read_whatever_the_chunking() {
        let mut stream = chunk(b'P', "ibdata1", &vec![7u8; 100_000]);
        stream.extend(chunk(b'E', "ibdata1", &[]));
        stream.extend(chunk(
            b'P',
            "mariadb_backup_binlog_info",
            b"mysql-bin.000003\t1234\t0-1-202\n",
        ));
        stream.extend(chunk(b'E', "mariadb_backup_binlog_info", &[]));
        for size in [1, 7, 13, 4096, stream.len()] {
            let mut s = Scanner::new();
            for piece in stream.chunks(size) {
                s.feed(piece);
            }
            assert_eq!(s.gtid().as_deref(), Ok("0-1-202"), "pieces of {size}");
        }
        let mut s = Scanner::new();
        s.feed(b"PK\x03\x04 not a stream at all");
        assert!(s.gtid().unwrap_err().contains("not an mbstream"));
        let mut s = Scanner::new();
        s.feed(&chunk(b'P', "ibdata1", b"x"));
        assert!(s.gtid().unwrap_err().contains("no binlog info"));
    }
}
