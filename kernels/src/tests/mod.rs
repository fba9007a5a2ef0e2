//! The kernels' tests against the scalar reference. `./run.sh test` runs them checked, with
//! overflow checks and debug assertions on: `cargo test -p split-kernels --profile
//! kernels-checked` (the profile is in the workspace's Cargo.toml). Everything else links the
//! kernels without them, as the `dev` profile builds them — on, they made every forward 2.9×
//! slower (39.2 against 13.7 ms for the whole network, `./run.sh profile --limit 10 --codecs
//! f32`), the other crates' tests included. The length checks that guard the `unsafe` code
//! (`shape::checked_len`) do not depend on them: they are explicit and run in every build.

mod miri;
mod odd_shapes;
pub(crate) mod quant;

/// Overflow checks are on where these tests run checked (what the module's doc promises): an
/// overflowing addition panics instead of wrapping. Debug assertions come with them in that
/// profile and only there, which is how a plain `cargo test` tells it is not that run.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "the checks are on with `--profile kernels-checked`, the run `./run.sh test` makes"
)]
fn overflow_checks_are_on_in_the_kernels_tests() {
    let max = std::hint::black_box(u8::MAX);
    let result = std::panic::catch_unwind(|| max + std::hint::black_box(1u8));
    assert!(result.is_err(), "255u8 + 1 wrapped: overflow checks are off in this test build");
}
