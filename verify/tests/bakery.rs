use hilock_kernel::bakery::Variant;
use hilock_models::bakery::BakeryModel;

fn no_lease() -> Variant {
    Variant {
        leases: false,
        ..Variant::HILOCK
    }
}

#[test]
fn scratch() {
    for m in [BakeryModel::lock(
        "corrected no lease 2c 1r",
        2,
        1,
        2,
        2,
        no_lease(),
    )] {
        let r = m.check();
        println!("{}", r.summary());
    }
}
