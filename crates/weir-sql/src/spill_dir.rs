//! Batch mode's spill folder. DataFusion deletes its spill files when the query's
//! operators are dropped, which a failing or killed process may never do (a failed
//! 100M-event join left 23 GB behind). Each session spills into a folder of its own,
//! `weir-spill-<pid>-<id>` under `io.tmp.dirs` (or the system's temporary folder),
//! removed with the session whatever its queries left there; folders of processes that
//! no longer run (killed) are removed when the next session starts.

use std::path::{Path, PathBuf};

const PREFIX: &str = "weir-spill-";

/// A session's spill folder, removed when dropped.
#[derive(Debug)]
pub struct SpillDir(PathBuf);

impl SpillDir {
    /// Creates a fresh spill folder under `root` (the system's temporary folder when
    /// `None`), first removing the ones of processes that no longer run.
    pub fn create(root: Option<&str>) -> std::io::Result<Self> {
        let root = root.map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        remove_stale(&root);
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = root.join(format!("{PREFIX}{}-{}", std::process::id(), &id[..8]));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the spill folders under `root` whose process is gone. Only where processes
/// can be looked up (`/proc`); elsewhere nothing is removed.
fn remove_stale(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_folder_is_removed_with_its_files_and_stale_ones_at_the_next_start() {
        let root = tempfile::tempdir().unwrap();
        let root_name = root.path().to_str().unwrap();
        let dir = SpillDir::create(Some(root_name)).unwrap();
        std::fs::write(dir.path().join("spill.arrow"), b"rows").unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
        // A folder of a process that is gone (no pid is this large) and one of a live
        // process (this one) that is not the new session's.
        let stale = root.path().join(format!("{PREFIX}4294967295-deadbeef"));
        std::fs::create_dir_all(&stale).unwrap();
        let live = SpillDir::create(Some(root_name)).unwrap();
        let other = SpillDir::create(Some(root_name)).unwrap();
        assert!(!stale.exists());
        assert!(live.path().exists() && other.path().exists());
    }
}
