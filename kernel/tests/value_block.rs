//! hilock's lock value block (`spec/SPEC.md` 1.15): the W holder writes a 32-byte block
//! (`Input::SetValue`); the token carries the token node's block and every grant its
//! granter's, so every later holder reads the value the last W holder wrote
//! (`Site::value`); only W writes; a regenerated token's block is not valid until the next
//! write. Every step runs in the one harness with every safety property checked after it
//! (P16, a reader of a valid block reads the last value written, among them).

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{rebuild, FaultSite, LockReport, Stamped};
use hilock_kernel::{
    Input, KernelError, Mode, Msg, NodeId, Output, Protocol, Rule, Site, ValueBlock, VALUE_LEN,
};

use crate::star;
use star::*;

fn set_value<M>(v: u8) -> Input<'static, M> {
    Input::SetValue {
        lock: L,
        value: [v; VALUE_LEN],
    }
}

/// The block node `n` reads (`None`: it holds nothing).
fn value(c: &Cluster<S>, n: u16) -> Option<ValueBlock> {
    c.site(NodeId(n)).value(L).unwrap()
}

fn written(v: u8) -> Option<ValueBlock> {
    Some(ValueBlock::new([v; VALUE_LEN]))
}

fn granted(log: &Log, n: u16, mode: Mode) -> bool {
    log.iter()
        .any(|(at, o)| *at == n && matches!(o, Output::Granted { mode: m, .. } if *m == mode))
}

/// The value blocks of the grants (`Msg::Grant`) node `from` sent in `log`.
fn grant_values(log: &Log, from: u16) -> Vec<ValueBlock> {
    log.iter()
        .filter_map(|(at, o)| match o {
            Output::Send {
                msg: Msg::Grant { value, .. },
                ..
            } if *at == from => Some(*value),
            _ => None,
        })
        .collect()
}

/// `spec/SPEC.md` 1.15, the token: node 0 (the token node) holds W, writes 7 and releases;
/// node 1's R request takes the token (Rule 3.2), which carries the block, and node 1
/// reads 7. Before anything is written a holder reads the initial block: zeros, valid.
#[test]
fn the_token_carries_the_value_the_w_holder_wrote_to_the_next_reader() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    assert_eq!(value(&c, 0), Some(ValueBlock::INITIAL));
    let st = c.input(NodeId(0), set_value(7)).unwrap();
    assert!(st.outputs.is_empty() && st.rules.contains(Rule::SetValue));
    c.check_safety().unwrap();
    assert_eq!(value(&c, 0), written(7));
    release(&mut c, 0);
    assert_eq!(value(&c, 0), None, "nothing held, nothing read");
    let log = acquire(&mut c, 1, Mode::R);
    assert!(granted(&log, 1, Mode::R), "{log:?}");
    assert!(log.iter().any(|(at, o)| *at == 0
        && matches!(o, Output::Send { msg: Msg::Token { value, .. }, .. } if Some(*value) == written(7))));
    assert!(c.site(NodeId(1)).lock(L).unwrap().has_token());
    assert_eq!(value(&c, 1), written(7));
}

/// `spec/SPEC.md` 1.15, copy grants by the token node (Rule 3.2) and by a copy holder
/// (Rule 3.1): in the chain 0 ← 1 ← 2, node 0 holds W, writes 5 and downgrades to R (the
/// block stays); node 1's R copy comes from node 0 with 5, and node 2's R copy from node 1
/// — not the token node — with 5 as well.
#[test]
fn every_copy_grant_carries_its_granters_value() {
    let mut c = chain();
    acquire(&mut c, 0, Mode::W);
    run(&mut c, 0, set_value(5));
    run(
        &mut c,
        0,
        Input::Downgrade {
            lock: L,
            mode: Mode::R,
        },
    );
    assert_eq!(value(&c, 0), written(5));
    let log = acquire(&mut c, 1, Mode::R);
    assert!(granted(&log, 1, Mode::R), "{log:?}");
    assert_eq!(grant_values(&log, 0), vec![ValueBlock::new([5; VALUE_LEN])]);
    assert!(!c.site(NodeId(1)).lock(L).unwrap().has_token());
    let log = acquire(&mut c, 2, Mode::R);
    assert!(granted(&log, 2, Mode::R), "{log:?}");
    assert_eq!(grant_values(&log, 1), vec![ValueBlock::new([5; VALUE_LEN])]);
    assert_eq!(value(&c, 2), written(5));
}

/// `spec/SPEC.md` 1.15, a later write: node 0 writes 1 as W, releases; node 1 reads 1 as
/// R and releases; node 2 takes W, writes 2 and releases; node 3 then reads 2, never 1.
#[test]
fn a_reader_reads_the_last_value_written_before_its_grant() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    run(&mut c, 0, set_value(1));
    release(&mut c, 0);
    acquire(&mut c, 1, Mode::R);
    assert_eq!(value(&c, 1), written(1));
    release(&mut c, 1);
    assert!(granted(&acquire(&mut c, 2, Mode::W), 2, Mode::W));
    assert_eq!(value(&c, 2), written(1));
    run(&mut c, 2, set_value(2));
    release(&mut c, 2);
    acquire(&mut c, 3, Mode::R);
    assert_eq!(value(&c, 3), written(2));
}

/// `spec/SPEC.md` 1.15, only W writes: nothing held, R, IW and U are refused with
/// `NotWriter` and change nothing (a U holder may have R copies beside it that grant the
/// old value on); once the U holder has upgraded to W (Rule 7) it writes.
#[test]
fn only_the_w_holder_writes_and_a_refused_write_changes_nothing() {
    fn refused(c: &Cluster<S>, at: u16) {
        let mut site = c.site(NodeId(at)).clone();
        let mut out: heapless::Vec<Output<Msg<4>>, 32> = heapless::Vec::new();
        assert_eq!(
            site.step(set_value(9), &mut out),
            Err(KernelError::NotWriter(L))
        );
        assert!(out.is_empty() && site == *c.site(NodeId(at)));
    }
    let mut c = star();
    refused(&c, 0);
    for mode in [Mode::IR, Mode::R, Mode::IW, Mode::U] {
        acquire(&mut c, 0, mode);
        refused(&c, 0);
        if mode != Mode::U {
            release(&mut c, 0);
        }
    }
    // Node 0 holds U (the token node, Rule 7); node 1 gets an R copy beside it.
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    refused(&c, 0);
    refused(&c, 1);
    run(&mut c, 0, Input::Upgrade { lock: L });
    release(&mut c, 1);
    assert_eq!(c.site(NodeId(0)).lock(L).unwrap().held(), Mode::W);
    run(&mut c, 0, set_value(9));
    assert_eq!(value(&c, 0), written(9));
}

/// `spec/SPEC.md` 1.15, recovery: node 0 (the token node) wrote 3 as W and granted node 1
/// an R copy after downgrading; node 0 dies. The plan regenerates the token at node 1
/// (`spec/SPEC.md` 1.8): its block is not valid (the DLM's `IVVALBLK`) — zeros, `get` is
/// `None` — and so is every copy it grants, until the next W holder writes.
#[test]
fn a_regenerated_tokens_value_is_not_valid_until_the_next_write() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    run(&mut c, 0, set_value(3));
    run(
        &mut c,
        0,
        Input::Downgrade {
            lock: L,
            mode: Mode::R,
        },
    );
    acquire(&mut c, 1, Mode::R);
    assert_eq!(value(&c, 1), written(3));
    let mut f: Vec<FaultSite<4, 1, 4>> = (1..4)
        .map(|n| FaultSite::new(c.site(NodeId(n)).clone()))
        .collect();
    let members = [false, true, true, true];
    let reports: Vec<LockReport<4>> = f.iter().map(|s| s.report(L).unwrap()).collect();
    let plan = rebuild::<4, 4>(1, &members, &reports).unwrap();
    assert_eq!((plan.root, plan.regenerated), (NodeId(1), true));
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    for s in &mut f {
        s.install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
    }
    let v = Protocol::value(&f[0], L).unwrap().unwrap();
    assert!(!v.is_valid() && v.get().is_none() && v == ValueBlock::NOT_VALID);
    // Node 2 asks for R: the new token node grants a copy of the block that is not valid.
    out.clear();
    f[1].step(
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
        &mut out,
    )
    .unwrap();
    let req = out.pop().unwrap();
    let Output::Send { msg, .. } = req else {
        panic!("{req:?}")
    };
    out.clear();
    f[0].step(
        Input::Deliver {
            from: NodeId(2),
            msg: &msg,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send { msg: grant, .. }) = out
        .iter()
        .find(|o| matches!(o, Output::Send { .. }))
        .cloned()
    else {
        panic!("{out:?}")
    };
    assert!(matches!(grant.msg, Msg::Grant { value, .. } if value == ValueBlock::NOT_VALID));
    out.clear();
    f[1].step(
        Input::Deliver {
            from: NodeId(1),
            msg: &grant,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(Protocol::value(&f[1], L), Ok(Some(ValueBlock::NOT_VALID)));
    // Everyone releases; node 1 takes W and writes: valid again.
    for i in [0, 1] {
        out.clear();
        f[i].step(Input::Release { lock: L }, &mut out).unwrap();
        for o in out.clone() {
            if let Output::Send { to, msg } = o {
                let from = NodeId(i as u16 + 1);
                f[to.idx() - 1]
                    .step(
                        Input::Deliver { from, msg: &msg },
                        &mut heapless::Vec::<Output<Stamped<Msg<4>>>, 64>::new(),
                    )
                    .unwrap();
            }
        }
    }
    out.clear();
    f[0].step(
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(Protocol::held(&f[0], L), Ok(Mode::W));
    assert_eq!(Protocol::value(&f[0], L), Ok(Some(ValueBlock::NOT_VALID)));
    f[0].step(set_value(4), &mut out).unwrap();
    assert_eq!(Protocol::value(&f[0], L), Ok(written(4)));
}

/// `spec/SPEC.md` 1.15, recovery that keeps the token: node 0 (the token node) wrote 8
/// under W and holds R after a downgrade; node 1 dies. The plan keeps the token at node 0
/// (not regenerated), and its block stays valid with 8.
#[test]
fn a_recovery_that_keeps_the_token_keeps_its_value() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    run(&mut c, 0, set_value(8));
    run(
        &mut c,
        0,
        Input::Downgrade {
            lock: L,
            mode: Mode::R,
        },
    );
    let mut f: Vec<FaultSite<4, 1, 4>> = [0, 2, 3]
        .iter()
        .map(|&n| FaultSite::new(c.site(NodeId(n)).clone()))
        .collect();
    let members = [true, false, true, true];
    let reports: Vec<LockReport<4>> = f.iter().map(|s| s.report(L).unwrap()).collect();
    let plan = rebuild::<4, 4>(1, &members, &reports).unwrap();
    assert_eq!((plan.root, plan.regenerated), (NodeId(0), false));
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    for s in &mut f {
        s.install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
    }
    assert_eq!(Protocol::value(&f[0], L), Ok(written(8)));
}

/// `FaultSite` passes a write to its site; the Naimi-Trehel baseline has no value block
/// and refuses it with `ValueUnsupported`, changing nothing.
#[test]
fn a_fault_site_writes_and_the_baseline_refuses_to() {
    let mut f = FaultSite::new(Site::<4, 1, 4>::new(NodeId(0), NodeId(0)).unwrap());
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    Protocol::step(
        &mut f,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    Protocol::step(&mut f, set_value(6), &mut out).unwrap();
    assert_eq!(Protocol::value(&f, L), Ok(written(6)));
    let n = baseline_refuses(true, set_value(6), KernelError::ValueUnsupported(L));
    assert_eq!(Protocol::value(&n, L), Ok(None));
}

/// `spec/SPEC.md` 1.15, the block in traces (JSON): 64 hex digits when valid, `null` when
/// not; both read back as they were, and other text is refused.
#[test]
fn a_value_block_reads_back_from_its_json_text() {
    let v = ValueBlock::new([0xab; VALUE_LEN]);
    let text = serde_json::to_string(&v).unwrap();
    assert_eq!(text, format!("\"{}\"", "ab".repeat(VALUE_LEN)));
    assert_eq!(serde_json::from_str::<ValueBlock>(&text).unwrap(), v);
    let text = serde_json::to_string(&ValueBlock::NOT_VALID).unwrap();
    assert_eq!(text, "null");
    assert_eq!(
        serde_json::from_str::<ValueBlock>(&text).unwrap(),
        ValueBlock::NOT_VALID
    );
    assert!(serde_json::from_str::<ValueBlock>("\"abc\"").is_err());
    assert!(
        serde_json::from_str::<ValueBlock>(&format!("\"{}\"", "zz".repeat(VALUE_LEN))).is_err()
    );
}
