//! The models' presentation: stored traces read and refused, sequence diagrams drawn, the
//! lines of a report. Integration tests of the public API (the library has no unit tests:
//! `[lib] test = false` spares `cargo test` a second build of the crate).

/// Reading stored traces and checking the other models' configurations (`open.rs`).
mod open {
    use hilock_models::open::*;

    #[test]
    fn a_slug_has_single_hyphens_and_none_at_either_end() {
        assert_eq!(
            slug("P17 a blocking notification names a waiter, once per hold"),
            "p17-a-blocking-notification-names-a-waiter-once-per-hold"
        );
        assert_eq!(
            slug("P1 mutual exclusion (live leases)"),
            "p1-mutual-exclusion-live-leases"
        );
        assert_eq!(slug("P6 FIFO bypass ≤ 0"), "p6-fifo-bypass-0");
        assert_eq!(slug("P1 mutual exclusion"), "p1-mutual-exclusion");
    }

    /// `hilock check` reports the progress of a tree, agents or bakery check as of every
    /// other model (before, these three ran silent however long they took), and stops a
    /// failing one at a bound after its first violation.
    #[test]
    fn every_model_s_check_reports_its_progress() {
        for (file, text) in [
            (
                "tree-slides",
                include_str!("../../spec/counterexamples/configs/tree-slides.json"),
            ),
            (
                "agents-self-wait",
                include_str!("../../spec/counterexamples/configs/agents-self-wait.json"),
            ),
            (
                "bakery-literal",
                include_str!("../../spec/counterexamples/configs/bakery-literal.json"),
            ),
        ] {
            let cfg: OtherConfig = serde_json::from_str(text).expect(file);
            let mut calls = 0;
            let r = check_other(&cfg, |_, _, _| calls += 1).expect(file);
            assert!(calls >= 1, "{file}: no progress");
            assert!(
                !r.ok,
                "{file}: the saved counterexample's configuration fails"
            );
        }
    }

    /// A stored trace whose steps are renumbered is refused by every reader (`hilock
    /// replay`, `hilock explore --trace`), naming the first step out of place.
    #[test]
    fn a_trace_whose_steps_are_misnumbered_is_refused() {
        let text = include_str!("../../spec/counterexamples/release-race-literal.json");
        let t = parse_base_trace(text).expect("the stored trace reads");
        assert!(t.steps.len() >= 3);
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["steps"][2]["index"] = serde_json::json!(7);
        let err = parse_base_trace(&v.to_string()).unwrap_err();
        assert!(
            err.contains("the step at position 2 is numbered 7"),
            "{err}"
        );
        assert!(diagram_of(&v.to_string()).is_err());
    }
}

/// Sequence diagrams of a trace (`seq.rs`).
mod seq {
    use hilock_models::seq::*;

    #[test]
    fn arrows_and_dots_are_drawn_with_escaped_labels() {
        let mut d = Diagram::new(vec!["n0".into(), "n1".into()]);
        d.local(1, "acquire R");
        d.message(1, 0, "request R <n1>");
        d.message(0, 0, "self");
        let svg = d.svg();
        assert_eq!(svg.matches("class=\"msg\"").count(), 1);
        assert_eq!(svg.matches("class=\"local\"").count(), 2);
        assert!(svg.contains("request R &lt;n1&gt;"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let html = d.html(
            "t & u",
            &["n1 acquire R".into()],
            &[vec!["n1 is granted R".into()]],
        );
        assert!(html.contains("<title>t &amp; u</title>"), "{html}");
        assert!(
            html.contains("<li value=\"0\">n1 acquire R<ul class=\"details\"><li>n1 is granted R</li></ul></li>"),
            "{html}"
        );
    }

    /// A message is drawn from the row that sent it to the row that delivered it; one
    /// never delivered is drawn dashed to a row of its own below the last step.
    #[test]
    fn a_message_runs_from_its_send_to_its_delivery_or_stays_in_flight() {
        let mut d = Diagram::new(vec!["n0".into(), "n1".into()]);
        d.local(0, "acquire W");
        d.send(0, 1, "req", "request W");
        d.send(0, 1, "ping", "ping");
        d.local(1, "acquire R");
        d.deliver(0, 1, "req", "request W");
        let svg = d.svg();
        // Row 0 is at y = 66, row 2 at y = 118; the ping's own row (3) at y = 144.
        assert!(
            svg.contains("class=\"msg\" x1=\"90\" y1=\"66\" x2=\"290\" y2=\"118\""),
            "{svg}"
        );
        assert!(
            svg.contains("class=\"inflight\" x1=\"90\" y1=\"66\" x2=\"290\" y2=\"144\""),
            "{svg}"
        );
        assert_eq!(svg.matches("class=\"inflight\"").count(), 1, "{svg}");
        assert!(svg.contains(">ping</text>") && svg.contains(">in flight</text>"));
        assert_eq!(d.pending.len(), 1);
    }

    /// A copy delivered by a duplicating network is drawn from the send's row and the
    /// message stays in flight until it is delivered itself.
    #[test]
    fn a_copy_is_drawn_from_its_send_and_leaves_the_message_in_flight() {
        let mut d = Diagram::new(vec!["a".into(), "b".into()]);
        d.local(0, "asks");
        d.send(0, 1, "m", "m");
        d.deliver_copy(0, 1, "m", "m (a copy)");
        assert_eq!(d.pending.len(), 1, "the message itself is still in flight");
        d.deliver(0, 1, "m", "m");
        assert!(d.pending.is_empty());
        let svg = d.svg();
        assert_eq!(
            svg.matches("class=\"msg\" x1=\"90\" y1=\"66\"").count(),
            2,
            "both deliveries drawn from the send's row: {svg}"
        );
    }

    /// Sends read off the network before and after a step: a message delivered and an
    /// equal one sent in the same step is still a send; a message on the network from the
    /// start is drawn from the top.
    #[test]
    fn sends_are_read_off_the_network_with_multiplicity() {
        let w = |from, to, key: &str| Wire {
            from,
            to,
            key: key.into(),
            label: key.into(),
        };
        let mut d = Diagram::new(vec!["a".into(), "b".into()]);
        d.initially(&[w(0, 1, "m")]);
        // Step 0 delivers the initial m and sends an equal m back on the same channel.
        d.deliver(0, 1, "m", "m");
        d.sends_between(&[w(0, 1, "m")], &[w(0, 1, "m")], Some((0, 1, "m")));
        assert_eq!(d.pending.len(), 1);
        assert_eq!(d.pending[0].sent, 0);
        // Step 1 sends nothing new: the m on the network is the one sent at step 0.
        d.local(1, "waits");
        d.sends_between(&[w(0, 1, "m")], &[w(0, 1, "m")], None);
        assert_eq!(d.pending.len(), 1);
        let svg = d.svg();
        assert!(
            svg.contains("class=\"msg\" x1=\"90\" y1=\"40\" x2=\"290\" y2=\"66\""),
            "{svg}"
        );
        assert!(
            svg.contains("class=\"inflight\" x1=\"90\" y1=\"66\" x2=\"290\" y2=\"118\""),
            "{svg}"
        );
    }

    /// A message that leaves the network undelivered is drawn lost at the step after which
    /// it was gone, not in flight.
    #[test]
    fn a_dropped_message_is_drawn_lost_not_in_flight() {
        let w = Wire {
            from: 0,
            to: 1,
            key: "m".into(),
            label: "m".into(),
        };
        let mut d = Diagram::new(vec!["a".into(), "b".into()]);
        d.local(0, "sends");
        d.sends_between(&[], std::slice::from_ref(&w), None);
        d.local(1, "crashes");
        d.sends_between(std::slice::from_ref(&w), &[], None);
        assert!(d.pending.is_empty());
        assert_eq!(d.lost.len(), 1);
        assert_eq!(d.lost[0].1, 1);
        let svg = d.svg();
        assert!(!svg.contains("class=\"inflight\""), "{svg}");
        // From row 0 (y = 66) half-way to b at row 1 (y = 92).
        assert!(
            svg.contains("class=\"lost\" x1=\"90\" y1=\"66\" x2=\"190\" y2=\"79\""),
            "{svg}"
        );
        assert!(svg.contains("✕ lost: m"), "{svg}");
    }
}

/// The lines of a check's report (`check.rs`).
mod check {
    use hilock_models::check::*;

    fn report(name: &str, holds: bool) -> PropertyReport<()> {
        PropertyReport {
            name: name.to_string(),
            kind: "always".into(),
            holds,
            counterexample: None,
        }
    }

    #[test]
    fn every_verdict_of_a_report_starts_in_one_column_after_the_longest_name() {
        let long = "P17 a blocking notification names a waiter, once per hold";
        let props = [report("P1 mutual exclusion", true), report(long, false)];
        let width = name_column(&props);
        let lines: Vec<String> = props.iter().map(|p| p.line_in(width)).collect();
        assert_eq!(lines[1], format!("  {long} VIOLATED\n"));
        let at = |l: &str, v: &str| l.find(v).map(|i| l[..i].chars().count());
        assert_eq!(
            at(&lines[0], "holds"),
            at(&lines[1], "VIOLATED"),
            "{lines:?}"
        );
        // Short names keep the usual column.
        let short = [report("P1 mutual exclusion", true)];
        assert_eq!(short[0].line_in(name_column(&short)), short[0].line());
    }

    #[test]
    fn counts_read_once_twice_and_n_times() {
        assert_eq!(times(1), "once");
        assert_eq!(times(2), "twice");
        assert_eq!(times(3), "3 times");
        assert!(witness_verdict(1).contains("bypassed once"));
        assert!(!witness_verdict(1).contains("violated"));
    }
}
