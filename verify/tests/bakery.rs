use hilock_kernel::bakery::Variant;
use hilock_models::bakery::{BakeryModel, Timing};

fn no_lease() -> Variant {
    Variant { leases: false, ..Variant::HILOCK }
}

#[test]
fn scratch() {
    let v = Variant::LITERAL;
    let r = BakeryModel::lock("literal 2c 1r", 2, 1, 2, 2, v).refute();
    println!("{}", r.summary());
    for m in [
        BakeryModel::lock("corrected no lease 2c 1r", 2, 1, 2, 2, no_lease()),
        BakeryModel::lock("literal crash", 2, 1, 2, 2, Variant{tie_break: true, ..v}).with_crashes(1),
        BakeryModel::lock("hilock crash sync", 2, 1, 2, 2, Variant::HILOCK).with_crashes(1).with_timing(Timing::Synchronous { horizon: 8 }),
    ] {
        let r = m.check();
        println!("{}", r.summary());
    }
}
