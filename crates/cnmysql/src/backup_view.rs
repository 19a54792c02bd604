//! How a taken backup is shown to a person, by `cnmysql local backup` and
//! the plugin's `backup`.

/// One line for a person: which backup, of which instance, how big,
/// consistent with what.
pub(crate) fn say_taken(t: &cnmysql_local::Outcome) {
    let m = &t.taken.manifest.record;
    println!(
        "{}",
        backup_line(&m.id, &m.instance, m.raw_bytes, m.stored_bytes, &m.gtid)
    );
}

pub(crate) fn backup_line(id: &str, instance: &str, raw: u64, stored: u64, gtid: &str) -> String {
    format!("backup {id} of {instance}: {raw} bytes ({stored} stored), consistent with {gtid}")
}
