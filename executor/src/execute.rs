//! `Execute`: the one trait every way of running a program implements, so a host can
//! hold any of them (in-process, a worker process, a daemon) behind one type.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use codemode_protocol::Outcome;

use crate::request::Request;

/// The future [`Execute::execute`] returns.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// Runs one program and reports its outcome.
///
/// [`crate::Executor`] (in-process, or process isolation by its config) and
/// [`crate::RemoteExecutor`] (a daemon over a socket) implement it with the same
/// contract: the outcome says `result` or `error` with the logs either way; nothing a
/// program does is a panic or an `Err`; calls come back to the request's dispatch in
/// this process; dropping the future ends the execution.
///
/// ```
/// use codemode_executor::{Execute, Executor, Request};
///
/// async fn answer(executor: &dyn Execute) -> String {
///     executor.execute(Request::new("async () => 6 * 7")).await.to_json_string()
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// assert_eq!(answer(&Executor::default()).await, r#"{"result":42,"logs":[]}"#);
/// # });
/// ```
pub trait Execute: Send + Sync {
    /// Run `request`'s program in a fresh engine and report how it ended.
    fn execute(&self, request: Request) -> ExecuteFuture<'_>;
}

impl Execute for crate::Executor {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        Box::pin(crate::Executor::execute(self, request))
    }
}

impl Execute for crate::RemoteExecutor {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        Box::pin(crate::RemoteExecutor::execute(self, request))
    }
}

impl<T: Execute + ?Sized> Execute for Arc<T> {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        (**self).execute(request)
    }
}

impl<T: Execute + ?Sized> Execute for &T {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        (**self).execute(request)
    }
}
