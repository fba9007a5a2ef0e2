//! What a panic leaves behind. The browser module is built with `panic = "abort"`: a panic
//! traps the instance (`WebAssembly.RuntimeError: unreachable`) and says nothing of why, and
//! whatever it was doing is left half done, so the instance must not serve again. The hook
//! installed here keeps the panic's message (and logs it to the console) before the trap; the
//! client reads it with [`take_panic_message`], reports it in a `wasm_trap` error and starts a
//! fresh instance (`web/client/remote.js`).

use std::sync::Mutex;

use wasm_bindgen::prelude::*;

/// The last panic's message, until the client takes it.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Keep every panic's message (file, line and text), then run the hook that was there before.
pub fn install() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.to_string();
        crate::js::error_log(&format!("wasm-edge panicked: {message}"));
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(message);
        }
        previous(info);
    }));
}

/// The message of the panic that trapped this instance, once (`null` when there was none).
#[wasm_bindgen(js_name = takePanicMessage)]
pub fn take_panic_message() -> Option<String> {
    LAST_PANIC.lock().ok().and_then(|mut last| last.take())
}

/// Panic with `message`: what a bug in the module would do. The browser tests call it to check
/// that the client reports the message and replaces the trapped instance; nothing else should.
#[wasm_bindgen(js_name = forcePanicForTests)]
pub fn force_panic_for_tests(message: String) {
    panic!("{message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panics_message_is_kept_once() {
        install();
        let caught = std::panic::catch_unwind(|| force_panic_for_tests("the test's panic".into()));
        assert!(caught.is_err());
        let message = take_panic_message().expect("the hook kept the message");
        assert!(message.contains("the test's panic"), "{message}");
        assert!(message.contains("panic.rs"), "the message says where: {message}");
        assert_eq!(take_panic_message(), None, "taken once");
    }
}
