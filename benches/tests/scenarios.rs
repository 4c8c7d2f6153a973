//! Every bench scenario performs the step it is named after.

#[test]
fn scenarios_do_what_they_say() {
    let v = hilock_benches::scenarios::all();
    assert_eq!(v.len(), 8);
}
