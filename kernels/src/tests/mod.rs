//! The kernels' tests against the scalar reference. They are the crate's own unit tests, not
//! integration tests under `tests/`, for one reason: a crate compiled for its own tests uses the
//! `test` profile, where `[profile.test.package.split-kernels]` keeps overflow checks on, while
//! the crate linked into anything else (the server, the tools, other crates' tests) uses `dev`,
//! where they are off — on, they made every forward of the demo server and the lab 2.9× slower
//! (39.2 against 13.7 ms for the whole network, `./run.sh profile --limit 10 --codecs f32`).
//! The length checks that guard the `unsafe` code (`shape::checked_len`) do not depend on them:
//! they are explicit and run in every build.

mod miri;
mod odd_shapes;

/// Overflow checks are on in these tests (what the module's doc promises): an overflowing
/// addition panics instead of wrapping.
#[test]
fn overflow_checks_are_on_in_the_kernels_tests() {
    let max = std::hint::black_box(u8::MAX);
    let result = std::panic::catch_unwind(|| max + std::hint::black_box(1u8));
    assert!(result.is_err(), "255u8 + 1 wrapped: overflow checks are off in this test build");
}
