//! verify
//!
//! The helpers the model checks share: [`pins_on`] and [`assert_pinned!`], the switch for
//! pinned state counts.

/// Whether the model checks assert their pinned unique-state counts: yes, unless the
/// environment sets `HILOCK_PINS=off`. A pinned count is a tripwire, not a property: the
/// rule-deletion table and mutation runs are judged with pins off, so that only a
/// property, a scenario or a behavioural test can turn a row red
/// (`docs/verification.md`, "Pinned state counts").
pub fn pins_on() -> bool {
    std::env::var("HILOCK_PINS").map_or(true, |v| v != "off")
}

/// `assert_eq!` on a pinned state count; nothing when [`pins_on`] is false.
#[macro_export]
macro_rules! assert_pinned {
    ($($t:tt)*) => {
        if $crate::pins_on() {
            assert_eq!($($t)*);
        }
    };
}
