//! Engines made ahead of demand: the runtime's built-ins booted on an idle thread (the
//! prelude with its ops, then the codec), so a run starts at its own entry scope; and
//! renewed after a run, where the engine can be, to the state it was sealed in then.

use super::calls::{self, StateSlot};
use super::prelude;
use crate::api::config::Limits;
use crate::engine::{Arg, Engine};

/// An engine not yet armed, with everything every execution does first already done in it:
/// its ops made, the prelude booted, the codec evaluated. No program source has reached it.
pub(crate) struct Warm<E: Engine> {
    pub(super) builtins: Builtins<E::Value>,
    /// Set to the execution's state when it starts; the ops read it from there.
    pub(super) slot: StateSlot,
    /// Whether the engine was sealed, so that it can be renewed after its run.
    sealed: bool,
    /// Declared last: the handles above go before it.
    pub(super) engine: E,
}

/// The handles a run takes from its warm engine.
#[derive(Clone)]
pub(super) struct Builtins<V> {
    /// Gives the prelude the execution's limits.
    pub(super) configure: V,
    /// The prelude's exports: `[receive, start, finish, describe, refusalText, stackOf]`.
    pub(super) exports: V,
    /// The codec, handed to the prelude's `start` with the entry scope.
    pub(super) codec: V,
}

impl<E: Engine> Warm<E> {
    /// A warm engine for these limits, sealed when `seal` (so that it can be renewed after
    /// its run). A built-in that throws is a bug of this crate, not of any program: it is
    /// an internal failure.
    pub(crate) fn make(
        memory_limit_bytes: usize,
        stack_limit_bytes: usize,
        seal: bool,
    ) -> Result<Warm<E>, String> {
        let failed = |what: &str| format!("the runtime's {what} did not evaluate on {}", E::NAME);
        let mut engine = E::new(memory_limit_bytes, stack_limit_bytes)?;
        let slot = StateSlot::default();
        let ops = engine.native_object(&calls::ops(&slot)).map_err(|_| failed("host functions"))?;
        let boot =
            engine.evaluate_builtin("codemode:prelude", prelude::source).map_err(|_| failed("prelude"))?;
        let booted = engine.call(&boot, &[Arg::Value(&ops)]).map_err(|_| failed("prelude"))?;
        let configure = engine.index(&booted, 0).ok_or_else(|| failed("prelude"))?;
        let exports = engine.index(&booted, 1).ok_or_else(|| failed("prelude"))?;
        // After the boot: the codec captures the host functions the prelude installs.
        let codec = engine
            .evaluate_builtin("codemode:codec", codemode_protocol::codec_source)
            .map_err(|_| failed("codec"))?;
        // Booted and not yet armed: what every execution of this engine starts from. Only
        // the handles kept are held across it (a handle dropped after the seal would be a
        // count the renewed heap still has).
        drop((ops, boot, booted));
        let sealed = seal && engine.seal();
        Ok(Warm { builtins: Builtins { configure, exports, codec }, slot, sealed, engine })
    }

    /// Taken by a run: the built-ins' handles for it to use, what renews the engine after
    /// it (if it was sealed), and the engine.
    pub(super) fn take(self) -> Taken<E> {
        let Warm { builtins, slot, sealed, engine } = self;
        if !sealed {
            return Taken { builtins, kept: None, engine };
        }
        Taken { builtins: builtins.clone(), kept: Some(Kept { builtins, slot }), engine }
    }

    /// The engine of an ended run, renewed to the state it was sealed in (nothing of the
    /// run left in it): a warm engine again. `None` when it cannot be renewed; it is then
    /// dropped. Every handle the run took must be dropped first.
    pub(super) fn renew(mut engine: E, kept: Kept<E::Value>) -> Option<Warm<E>> {
        kept.slot.empty();
        if engine.renew() {
            return Some(Warm { builtins: kept.builtins, slot: kept.slot, sealed: true, engine });
        }
        // Handles go before their engine.
        drop(kept);
        drop(engine);
        None
    }

    /// Whether this engine can be armed with `limits`.
    pub(super) fn fits(&self, limits: &Limits) -> bool {
        self.engine.fits(limits.memory_limit_bytes)
    }
}

/// What a run keeps of its warm engine for the renewal: the built-ins' handles (taken
/// before the seal, so a renewal leaves them valid) and the slot the ops read.
pub(super) struct Kept<V> {
    builtins: Builtins<V>,
    slot: StateSlot,
}

/// A warm engine as a run takes it; the handles are declared before their engine.
pub(super) struct Taken<E: Engine> {
    pub(super) builtins: Builtins<E::Value>,
    pub(super) kept: Option<Kept<E::Value>>,
    pub(super) engine: E,
}
