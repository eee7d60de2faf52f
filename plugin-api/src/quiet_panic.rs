//! A panic caught at the boundary is reported once, as the error [`crate::guard`]
//! returns, not also as Rust's raw panic block (and backtrace, under
//! `RUST_BACKTRACE=1`) on standard error before the host's one-line warning. The panic
//! hook this installs stays silent for panics inside a guarded call and keeps their
//! location for the error; every other panic goes to the hook that was there before.
//! The hook is per copy of `std`: a plugin `.so` installs it in its own, a built-in
//! plugin in the host's.

use std::{
    cell::{Cell, RefCell},
    panic::{self, AssertUnwindSafe},
    sync::Once,
};

thread_local! {
    /// How many guarded calls this thread is inside.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the last guarded panic of this thread happened.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) > 0 {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
                LOCATION.with(|l| *l.borrow_mut() = at);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, catching a panic silently; returns its payload and location.
pub(crate) fn catch_quietly<R>(
    f: impl FnOnce() -> R,
) -> Result<R, (Box<dyn std::any::Any + Send>, Option<String>)> {
    install();
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    result.map_err(|payload| (payload, LOCATION.with(|l| l.borrow_mut().take())))
}

#[cfg(test)]
mod tests {
    use crate::{PluginErrorKind, error::guard};

    #[test]
    fn a_guarded_panic_is_an_error_with_its_text_and_place() {
        let line = line!() + 1;
        let err = guard::<()>(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(err.kind, PluginErrorKind::Panic);
        assert_eq!(
            err.message,
            format!("panicked: boom 7 (at plugin-api/src/quiet_panic.rs:{line}:34)")
        );
        // Nested guards and later calls work the same; the place is not carried over.
        let ok = guard(|| guard(|| Ok(1)));
        assert_eq!(ok, Ok(1));
    }
}
