//! The built-in executor behind the wire protocol: `codemode stdio`, and any stream.
//!
//! One connection carries many executions, multiplexed by the client's execution ids.
//! Each call a program makes goes out as a `call` message and waits for the matching
//! `answer`; an answer for an execution or call that does not exist has no effect.
//!
//! Outcomes pass through with the kind the executor gave them. The two this layer makes:
//! an execute beyond [`ServeOptions::max_executions`] ends `invalid` (refused before it
//! ran), and an execution the client cancels ends `internal` (not the program's doing).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use codemode_protocol::texts;
use codemode_protocol::wire::{
    ClientMessage, FetchAnswer, Hello, PROTOCOL_NAME, PROTOCOL_VERSION, ProtocolError, ProtocolErrorKind,
    ServerMessage,
};
use codemode_protocol::{Dispatch, Outcome, OutcomeKind, ToolCall, error_envelope};
use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{read_frame, write_message};
use crate::outbound::{Outbound, OutboundFuture, OutboundRequest, from_fetch_answer};
use crate::{Executor, Request, RetainedExecution};

type Waiting = Arc<Mutex<HashMap<(u64, u64), oneshot::Sender<String>>>>;
type FetchWaiting = Arc<Mutex<HashMap<(u64, u64), oneshot::Sender<FetchAnswer>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What one connection is allowed, and who hears about its executions.
#[derive(Clone)]
pub struct ServeOptions {
    /// The token a client's hello must carry; `None` accepts any hello.
    pub token: Option<String>,
    /// The largest frame read; a longer one closes the connection with an error frame.
    pub max_frame_bytes: usize,
    /// Executions live at once on one connection; an execute beyond it gets an error
    /// outcome of kind `invalid`.
    pub max_executions: usize,
    /// Told when an execution starts and ends.
    pub on_event: Option<Arc<dyn Fn(ServeEvent) + Send + Sync>>,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            token: None,
            max_frame_bytes: super::MAX_FRAME_BYTES,
            max_executions: 1024,
            on_event: None,
        }
    }
}

/// What a served connection reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeEvent {
    /// An execution started.
    Started {
        /// The client's id for it.
        execution: u64,
    },
    /// An execution ended.
    Ended {
        /// The client's id for it.
        execution: u64,
        /// From execute to outcome.
        duration: std::time::Duration,
        /// The outcome's kind as the wire writes it (`returned`, `thrown`, `timeout`, ...),
        /// or `cancelled` for an execution the client cancelled.
        outcome: &'static str,
    },
}

/// Serve `executor` on one connection until the client closes it, accepting any hello.
pub async fn serve<R, W>(executor: Executor, input: R, output: W) -> Result<(), String>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with(executor, input, output, ServeOptions::default()).await
}

/// Whether `given` is `expected`, in time that does not depend on where they differ.
fn token_matches(given: Option<&str>, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

/// Serve `executor` on one connection with `options`. Executions still running when the
/// client goes are dropped, their engines disposed.
pub async fn serve_with<R, W>(
    executor: Executor,
    mut input: R,
    mut output: W,
    options: ServeOptions,
) -> Result<(), String>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let refuse = |kind, message: String| ServerMessage::Error(ProtocolError { kind, message });
    let first = match read_frame::<_, ClientMessage>(&mut input, options.max_frame_bytes).await {
        Ok(first) => first,
        Err(problem) => {
            let _ = write_message(&mut output, &refuse(problem.kind(), problem.to_string())).await;
            return Err(problem.to_string());
        }
    };
    match first {
        Some(ClientMessage::Hello(hello))
            if hello.protocol == PROTOCOL_NAME && hello.version == PROTOCOL_VERSION =>
        {
            if let Some(expected) = &options.token {
                if !token_matches(hello.token.as_deref(), expected) {
                    let message = if hello.token.is_none() {
                        "this daemon requires a token and the hello carried none; pass the token the daemon was started with"
                    } else {
                        "the hello's token is not this daemon's token"
                    };
                    let _ = write_message(
                        &mut output,
                        &refuse(ProtocolErrorKind::Unauthorized, message.to_owned()),
                    )
                    .await;
                    return Err(message.to_owned());
                }
            }
        }
        Some(ClientMessage::Hello(hello)) => {
            let message = format!(
                "this server speaks {PROTOCOL_NAME} version {PROTOCOL_VERSION}; the client said {} version {}",
                hello.protocol, hello.version
            );
            let _ = write_message(&mut output, &refuse(ProtocolErrorKind::Hello, message.clone())).await;
            return Err(message);
        }
        Some(_) => {
            let message = "the first message must be a hello".to_owned();
            let _ = write_message(&mut output, &refuse(ProtocolErrorKind::Hello, message.clone())).await;
            return Err(message);
        }
        None => return Ok(()),
    }
    let (out, mut outgoing) = mpsc::unbounded_channel::<ServerMessage>();
    let writer = tokio::spawn(async move {
        write_message(&mut output, &ServerMessage::Hello(Hello::current())).await?;
        while let Some(message) = outgoing.recv().await {
            write_message(&mut output, &message).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let waiting: Waiting = Arc::default();
    let fetch_waiting: FetchWaiting = Arc::default();
    let running: Arc<Mutex<HashMap<u64, JoinHandle<()>>>> = Arc::default();
    let retained: Arc<Mutex<HashMap<u64, RetainedExecution>>> = Arc::default();
    let result = loop {
        let message = match read_frame::<_, ClientMessage>(&mut input, options.max_frame_bytes).await {
            Ok(Some(message)) => message,
            Ok(None) => break Ok(()),
            Err(problem) => {
                let _ = out.send(refuse(problem.kind(), problem.to_string()));
                break Err(problem.to_string());
            }
        };
        match message {
            ClientMessage::Hello(_) => {}
            ClientMessage::Execute { execution, request } => {
                if lock(&running).contains_key(&execution) || lock(&retained).contains_key(&execution) {
                    let problem =
                        format!("execution {execution} is still live; give each execution its own id");
                    let _ = out.send(refuse(ProtocolErrorKind::DuplicateExecution, problem.clone()));
                    break Err(problem);
                }
                if lock(&running).len() + lock(&retained).len() >= options.max_executions {
                    let text = texts::TOO_MANY_EXECUTIONS.fill(&[&options.max_executions.to_string()]);
                    let _ = out.send(ServerMessage::Outcome {
                        execution,
                        outcome: Outcome::failure(OutcomeKind::Invalid, text, Vec::new()),
                    });
                    continue;
                }
                let retain = request.retain_handles;
                let next_call = Arc::new(AtomicU64::new(1));
                let dispatch: Arc<dyn Dispatch> = Arc::new(WireDispatch {
                    execution,
                    next_call: next_call.clone(),
                    out: out.clone(),
                    waiting: waiting.clone(),
                });
                let outbound: Arc<dyn Outbound> = Arc::new(WireOutbound {
                    execution,
                    next_call,
                    out: out.clone(),
                    waiting: fetch_waiting.clone(),
                });
                let request = Request::from_wire_with(request, Some(dispatch), Some(outbound));
                let (executor, out, running_map, retained_map, waiting_map) =
                    (executor.clone(), out.clone(), running.clone(), retained.clone(), waiting.clone());
                let on_event = options.on_event.clone();
                if let Some(tell) = &on_event {
                    tell(ServeEvent::Started { execution });
                }
                let started = std::time::Instant::now();
                // The task waits until its id is recorded as running: a run that ends at once
                // must not remove its id before the id is there (which left a stale entry
                // that refused the id's next use).
                let (recorded, gate) = oneshot::channel::<()>();
                let task = tokio::spawn(async move {
                    let _ = gate.await;
                    let outcome = if retain {
                        let (outcome, handle) = executor.execute_retained(request).await;
                        lock(&retained_map).insert(execution, handle);
                        outcome
                    } else {
                        executor.execute(request).await
                    };
                    lock(&running_map).remove(&execution);
                    lock(&waiting_map).retain(|(owner, _), _| *owner != execution);
                    if let Some(tell) = &on_event {
                        let kind = outcome.kind().as_str();
                        tell(ServeEvent::Ended { execution, duration: started.elapsed(), outcome: kind });
                    }
                    let _ = out.send(ServerMessage::Outcome { execution, outcome });
                });
                lock(&running).insert(execution, task);
                let _ = recorded.send(());
            }
            ClientMessage::Answer { execution, call, answer } => {
                if let Some(waiter) = lock(&waiting).remove(&(execution, call)) {
                    let _ = waiter.send(answer);
                }
            }
            ClientMessage::FetchAnswer { execution, call, answer } => {
                if let Some(waiter) = lock(&fetch_waiting).remove(&(execution, call)) {
                    let _ = waiter.send(answer);
                }
            }
            ClientMessage::Cancel { execution } => {
                if let Some(task) = lock(&running).remove(&execution) {
                    task.abort();
                    if let Some(tell) = &options.on_event {
                        tell(ServeEvent::Ended {
                            execution,
                            duration: std::time::Duration::ZERO,
                            outcome: "cancelled",
                        });
                    }
                    let outcome = Outcome::failure(OutcomeKind::Internal, texts::CANCELLED, Vec::new());
                    let _ = out.send(ServerMessage::Outcome { execution, outcome });
                }
                lock(&retained).remove(&execution);
            }
            ClientMessage::Release { execution } => {
                lock(&retained).remove(&execution);
            }
        }
    };
    for (_, task) in lock(&running).drain() {
        task.abort();
    }
    lock(&retained).clear();
    drop(out);
    let _ = writer.await;
    result
}

/// A program's calls, sent to the client and answered by it.
struct WireDispatch {
    execution: u64,
    next_call: Arc<AtomicU64>,
    out: mpsc::UnboundedSender<ServerMessage>,
    waiting: Waiting,
}

impl Dispatch for WireDispatch {
    fn dispatch(&self, tool_call: ToolCall) -> codemode_protocol::DispatchFuture {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        lock(&self.waiting).insert((self.execution, call), answer);
        let sent = self.out.send(ServerMessage::Call { execution: self.execution, call, tool_call });
        Box::pin(async move {
            if sent.is_err() {
                return error_envelope(texts::CONNECTION_CLOSED);
            }
            answered.await.unwrap_or_else(|_| error_envelope(texts::CONNECTION_CLOSED))
        })
    }
}

/// A program's fetches, sent to the client whose outbound handler decides them.
struct WireOutbound {
    execution: u64,
    next_call: Arc<AtomicU64>,
    out: mpsc::UnboundedSender<ServerMessage>,
    waiting: FetchWaiting,
}

impl Outbound for WireOutbound {
    fn fetch(&self, request: OutboundRequest) -> OutboundFuture {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        lock(&self.waiting).insert((self.execution, call), answer);
        let sent =
            self.out.send(ServerMessage::Fetch { execution: self.execution, call, request: request.into() });
        Box::pin(async move {
            if sent.is_err() {
                return Err(texts::CONNECTION_CLOSED.to_owned());
            }
            match answered.await {
                Ok(answer) => from_fetch_answer(answer),
                Err(_) => Err(texts::CONNECTION_CLOSED.to_owned()),
            }
        })
    }
}
