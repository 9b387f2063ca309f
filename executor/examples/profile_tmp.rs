//! Profiling driver (not committed).
use codemode_executor::{Executor, ExecutorConfig, Request};
fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ex = Executor::new(ExecutorConfig { workers: 1, ..Default::default() });
    rt.block_on(async {
        for _ in 0..20000 { ex.execute(Request::new("async () => 1")).await; }
    });
}
