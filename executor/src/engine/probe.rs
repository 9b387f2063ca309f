//! The confinement probe (cargo feature `confinement-probe`, tests only, never in a
//! release build): `__codemode_syscall(nr, ...args)` makes one raw system call on the
//! engine's thread, `__codemode_syscall_on_new_thread(nr, ...args)` the same on a thread
//! started for it; both return the raw result, a negative errno on failure. Numbers pass
//! as integers; strings as NUL-terminated buffers (writable copies, so a call may also
//! write into one); bytes as their buffer. A number of 2^32 or more is the i386 entry
//! point (`int 0x80`) with the number less 2^32 and no arguments (x86_64 only).

use std::rc::Rc;

use super::{Arg, Engine, HostValue, Op};

/// The probe's globals on `engine`: each binding calls this when it makes an engine, and
/// only under the feature.
pub(crate) fn install<E: Engine>(engine: &mut E) -> Result<(), String> {
    let failed = |_| "cannot install the confinement probe".to_owned();
    let object = engine.native_object(&globals()).map_err(failed)?;
    let install = engine
        .evaluate("(o) => { for (const k of Object.keys(o)) globalThis[k] = o[k]; }")
        .map_err(failed)?;
    engine.call(&install, &[Arg::Value(&object)]).map_err(failed)?;
    Ok(())
}

/// The globals, with their ops.
fn globals() -> [(&'static str, Op); 2] {
    [
        ("__codemode_syscall", Rc::new(|args| call(args, false))),
        ("__codemode_syscall_on_new_thread", Rc::new(|args| call(args, true))),
    ]
}

/// One argument as the kernel gets it: an integer, or a buffer it points into.
enum Word {
    Integer(i64),
    Buffer(Vec<u8>),
}

fn call(args: Vec<HostValue>, on_new_thread: bool) -> Result<HostValue, String> {
    let mut words = Vec::with_capacity(args.len());
    for arg in args {
        words.push(match arg {
            HostValue::Number(n) => Word::Integer(n as i64),
            HostValue::Bool(b) => Word::Integer(i64::from(b)),
            HostValue::Undefined => Word::Integer(0),
            HostValue::String(text) => Word::Buffer(text.into_bytes().into_iter().chain([0]).collect()),
            HostValue::Bytes(bytes) => Word::Buffer(bytes),
            _ => return Err("__codemode_syscall takes numbers, strings and bytes".to_owned()),
        });
    }
    if words.is_empty() || words.len() > 7 {
        return Err("__codemode_syscall takes a number and up to six arguments".to_owned());
    }
    let result = if on_new_thread {
        std::thread::spawn(move || raw(words)).join().map_err(|_| "the probe's thread panicked".to_owned())?
    } else {
        raw(words)
    };
    Ok(HostValue::Number(result as f64))
}

/// The system call itself: the raw result, or the negative errno.
fn raw(mut words: Vec<Word>) -> i64 {
    let mut values = [0i64; 7];
    for (value, word) in values.iter_mut().zip(words.iter_mut()) {
        *value = match word {
            Word::Integer(n) => *n,
            Word::Buffer(bytes) => bytes.as_mut_ptr() as i64,
        };
    }
    let [nr, a, b, c, d, e, f] = values;
    #[cfg(target_arch = "x86_64")]
    if nr >= 1 << 32 {
        let mut result = nr - (1 << 32);
        // SAFETY: none, as below: the i386 entry point with only the number in eax.
        unsafe { std::arch::asm!("int 0x80", inout("rax") result, options(nostack)) };
        return result;
    }
    // SAFETY: none: this is the probe, whose whole point is to make any system call the
    // test names; buffers it points at live in `words` until the call returns. It exists
    // only under the test-only feature.
    let result = unsafe { libc::syscall(nr, a, b, c, d, e, f) };
    if result == -1 {
        -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        result
    }
}
