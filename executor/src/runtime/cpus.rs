//! The CPUs this process may use, read once: the answer spin's bound and whether an
//! execution's thread gives way to the host after an outcome depend on them.

use std::sync::OnceLock;

/// The CPUs this process may use: its affinity mask and its cgroup's CPU quota (Rust's
/// `available_parallelism`). The first call reads them, so an executor calls it when made
/// and a worker before its confinement closes the files the quota is read from.
pub(crate) fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_count_is_what_the_process_may_use() {
        // The test process keeps its affinity and quota, so the kept count is today's.
        let now = std::thread::available_parallelism().map(|n| n.get()).unwrap();
        assert_eq!(super::cpus(), now);
    }
}
