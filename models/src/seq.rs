//! Message sequence diagrams of a path, as SVG: one vertical line per site, one row per
//! step, numbered from 0 as a trace's steps are; a delivered message is an arrow from its
//! sender to its receiver, a local step (a user operation, a latch) a labelled dot on its
//! site's line. Where the sends are known ([`Diagram::send`], [`Diagram::deliver`]), a
//! message is drawn from the row of the step that sent it to the row of the step that
//! delivered it, and a message still in flight after the last step as a dashed arrow from
//! its send to an "in flight" row below the last step; one the network dropped (read off
//! the network, [`Diagram::sends_between`]) as a dotted grey line that ends half-way,
//! marked "✕ lost", at the step after which it was gone. Every model's `Model::as_svg` draws
//! one, and `hilock replay --svg/--html` writes one to a file.

use std::fmt::Write;

/// One row of a diagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A message delivered from lane `from` to lane `to`.
    Message {
        /// Sender lane.
        from: usize,
        /// Receiver lane.
        to: usize,
        /// What was delivered.
        label: String,
        /// The row of the step that sent it, if known.
        sent: Option<usize>,
    },
    /// A local step at lane `at`.
    Local {
        /// The lane.
        at: usize,
        /// What happened.
        label: String,
    },
}

/// A message sent and not delivered (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Sender lane.
    pub from: usize,
    /// Receiver lane.
    pub to: usize,
    /// What identifies the message among the channel's others (equal keys are equal
    /// messages: which of two equal messages is delivered does not matter).
    pub key: String,
    /// What was sent.
    pub label: String,
    /// The row of the step that sent it ([`START`]: on the network from the start).
    pub sent: usize,
}

/// [`Pending::sent`] of a message on the network in the initial state, before any step:
/// drawn from the top of the diagram.
pub const START: usize = usize::MAX;

/// A message on the network of a model's state, for [`Diagram::sends_between`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wire {
    /// Sender lane.
    pub from: usize,
    /// Receiver lane.
    pub to: usize,
    /// What identifies it (as [`Pending::key`]).
    pub key: String,
    /// How the diagram names it.
    pub label: String,
}

/// A sequence diagram: the lanes (site names), the events, top to bottom, and the
/// messages sent and not delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagram {
    /// Lane names, left to right.
    pub lanes: Vec<String>,
    /// Events, top to bottom.
    pub events: Vec<Event>,
    /// Messages sent ([`Diagram::send`]) and not delivered ([`Diagram::deliver`]), oldest
    /// first: after the last step, the messages in flight.
    pub pending: Vec<Pending>,
    /// Messages the network dropped undelivered ([`Diagram::sends_between`]), each with
    /// the row of the step after which it was gone.
    pub lost: Vec<(Pending, usize)>,
}

const LANE: usize = 200;
const ROW: usize = 26;
const TOP: usize = 40;
const LEFT: usize = 90;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Diagram {
    /// A diagram with these lanes and no events.
    pub fn new(lanes: Vec<String>) -> Self {
        Diagram {
            lanes,
            events: Vec::new(),
            pending: Vec::new(),
            lost: Vec::new(),
        }
    }

    /// Adds a delivered message whose send is not recorded (drawn level, in its row).
    pub fn message(&mut self, from: usize, to: usize, label: impl Into<String>) {
        self.events.push(Event::Message {
            from,
            to,
            label: label.into(),
            sent: None,
        });
    }

    /// Records that the last step (the last row) sent a message from `from` to `to`;
    /// `key` identifies it for [`Diagram::deliver`].
    pub fn send(
        &mut self,
        from: usize,
        to: usize,
        key: impl Into<String>,
        label: impl Into<String>,
    ) {
        self.pending.push(Pending {
            from,
            to,
            key: key.into(),
            label: label.into(),
            sent: self.events.len().saturating_sub(1),
        });
    }

    /// Records the messages on the network in the initial state (sent before any step).
    pub fn initially(&mut self, wires: &[Wire]) {
        for w in wires {
            self.pending.push(Pending {
                from: w.from,
                to: w.to,
                key: w.key.clone(),
                label: w.label.clone(),
                sent: START,
            });
        }
    }

    /// Records as sent by the last row the messages on the network `after` a step that were
    /// not on it `before` the step, less the one it delivered (`delivered`: its sender, its
    /// receiver and its key), counted with multiplicity: for a model whose state holds the
    /// messages in flight but whose steps do not list what they sent.
    pub fn sends_between(
        &mut self,
        before: &[Wire],
        after: &[Wire],
        delivered: Option<(usize, usize, &str)>,
    ) {
        let mut left: Vec<&Wire> = before.iter().collect();
        if let Some((from, to, key)) = delivered {
            if let Some(i) = left
                .iter()
                .position(|w| w.from == from && w.to == to && w.key == key)
            {
                left.remove(i);
            }
        }
        let mut sent = Vec::new();
        for w in after {
            match left
                .iter()
                .position(|x| x.from == w.from && x.to == w.to && x.key == w.key)
            {
                Some(i) => {
                    left.remove(i);
                }
                None => sent.push(w),
            }
        }
        // What was on the network and is not any more, undelivered: lost in this step.
        let row = self.events.len().saturating_sub(1);
        for w in left {
            if let Some(i) = self
                .pending
                .iter()
                .position(|p| p.from == w.from && p.to == w.to && p.key == w.key)
            {
                let p = self.pending.remove(i);
                self.lost.push((p, row));
            }
        }
        for w in sent {
            self.send(w.from, w.to, w.key.clone(), w.label.clone());
        }
    }

    /// Adds a row delivering the oldest pending message from `from` to `to` with this
    /// `key`, drawn from the row that sent it; a message whose send was not recorded is
    /// drawn level as [`Diagram::message`] draws it.
    pub fn deliver(&mut self, from: usize, to: usize, key: &str, label: impl Into<String>) {
        let sent = self
            .pending
            .iter()
            .position(|p| p.from == from && p.to == to && p.key == key)
            .map(|i| self.pending.remove(i).sent);
        self.events.push(Event::Message {
            from,
            to,
            label: label.into(),
            sent,
        });
    }

    /// Draws `steps`, a path of a model whose states hold the messages in flight: the
    /// messages on the network at the start, then per action the row `draw` adds (it
    /// returns the message the action delivered: sender, receiver and key), and the
    /// messages the action put on the network, read off the states before and after it by
    /// `wires` ([`Diagram::sends_between`]).
    pub fn draw_path<S, A>(
        &mut self,
        steps: &[(S, Option<A>)],
        wires: impl Fn(&S) -> Vec<Wire>,
        mut draw: impl FnMut(&mut Self, &A) -> Option<(usize, usize, String)>,
    ) {
        if let Some((init, _)) = steps.first() {
            self.initially(&wires(init));
        }
        for (k, (st, a)) in steps.iter().enumerate() {
            let Some(a) = a else { continue };
            let delivered = draw(self, a);
            if let Some((next, _)) = steps.get(k + 1) {
                self.sends_between(
                    &wires(st),
                    &wires(next),
                    delivered.as_ref().map(|(f, t, key)| (*f, *t, key.as_str())),
                );
            }
        }
    }

    /// Adds a row delivering a copy of the oldest pending message from `from` to `to` with
    /// this `key` (a duplicating network), drawn from the row that sent it; the message
    /// itself stays pending.
    pub fn deliver_copy(&mut self, from: usize, to: usize, key: &str, label: impl Into<String>) {
        let sent = self
            .pending
            .iter()
            .find(|p| p.from == from && p.to == to && p.key == key)
            .map(|p| p.sent);
        self.events.push(Event::Message {
            from,
            to,
            label: label.into(),
            sent,
        });
    }

    /// Adds a local step.
    pub fn local(&mut self, at: usize, label: impl Into<String>) {
        self.events.push(Event::Local {
            at,
            label: label.into(),
        });
    }

    /// The height of the send of a message sent at `row` (at most `last`, the row of its
    /// delivery or the last step's).
    fn y_sent(row: usize, last: usize) -> usize {
        if row == START {
            TOP
        } else {
            TOP + (row.min(last) + 1) * ROW
        }
    }

    fn x(&self, lane: usize) -> usize {
        LEFT + lane.min(self.lanes.len().saturating_sub(1)) * LANE
    }

    /// The diagram as a standalone SVG document (dark text on a light background, so that
    /// it reads in the Explorer's dark pane and in a browser alike).
    pub fn svg(&self) -> String {
        let width = LEFT + self.lanes.len().saturating_sub(1) * LANE + 190;
        // Each message in flight ends in a row of its own below the last step.
        let rows = self.events.len() + self.pending.len();
        let height = TOP + (rows + 1) * ROW + 10;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"monospace\" font-size=\"11\">\
             <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
             markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
             <path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#1f4e9c\"/></marker></defs>\
             <rect width=\"100%\" height=\"100%\" fill=\"#fbfbf7\"/>"
        );
        for (i, name) in self.lanes.iter().enumerate() {
            let x = self.x(i);
            let _ = write!(
                s,
                "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#888\" \
                 stroke-dasharray=\"4 3\"/>\
                 <text x=\"{x}\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\" \
                 fill=\"#222\">{}</text>",
                TOP - 12,
                height - 6,
                esc(name)
            );
        }
        for (k, e) in self.events.iter().enumerate() {
            let y = TOP + (k + 1) * ROW;
            let _ = write!(s, "<text x=\"4\" y=\"{}\" fill=\"#999\">{k}</text>", y + 4);
            match e {
                Event::Message {
                    from,
                    to,
                    label,
                    sent,
                } if from != to => {
                    let (x1, x2) = (self.x(*from), self.x(*to));
                    let y1 = sent.map_or(y, |r| Self::y_sent(r, k));
                    let (mid, ymid) = ((x1 + x2) / 2, (y1 + y) / 2);
                    let _ = write!(
                        s,
                        "<line class=\"msg\" x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y}\" \
                         stroke=\"#1f4e9c\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\
                         <text x=\"{mid}\" y=\"{}\" text-anchor=\"middle\" fill=\"#1f4e9c\">{}</text>",
                        ymid - 4,
                        esc(label)
                    );
                }
                Event::Message {
                    from: at, label, ..
                }
                | Event::Local { at, label } => {
                    let x = self.x(*at);
                    let _ = write!(
                        s,
                        "<circle class=\"local\" cx=\"{x}\" cy=\"{y}\" r=\"4\" fill=\"#b5452b\"/>\
                         <text x=\"{}\" y=\"{}\" fill=\"#b5452b\">{}</text>",
                        x + 8,
                        y + 4,
                        esc(label)
                    );
                }
            }
        }
        for (p, row) in &self.lost {
            let (x1, x2) = (self.x(p.from), self.x(p.to));
            let (y1, y2) = (Self::y_sent(p.sent, *row), TOP + (row + 1) * ROW);
            // Half-way to its receiver, where it was dropped.
            let (xm, ym) = ((x1 + x2) / 2, (y1 + y2) / 2);
            let _ = write!(
                s,
                "<line class=\"lost\" x1=\"{x1}\" y1=\"{y1}\" x2=\"{xm}\" y2=\"{ym}\" \
                 stroke=\"#999\" stroke-width=\"1.5\" stroke-dasharray=\"2 3\"/>\
                 <text x=\"{}\" y=\"{}\" fill=\"#999\">✕ lost: {}</text>",
                xm + 4,
                ym + 4,
                esc(&p.label)
            );
        }
        for (j, p) in self.pending.iter().enumerate() {
            let y = TOP + (self.events.len() + j + 1) * ROW;
            let (x1, x2) = (self.x(p.from), self.x(p.to));
            let y1 = Self::y_sent(p.sent, self.events.len());
            let _ = write!(
                s,
                "<line class=\"inflight\" x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y}\" \
                 stroke=\"#b5452b\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\" \
                 marker-end=\"url(#arrow)\"/>\
                 <text x=\"4\" y=\"{}\" fill=\"#b5452b\">in flight</text>\
                 <text x=\"{}\" y=\"{}\" fill=\"#b5452b\">{}</text>",
                y + 4,
                x2 + 8,
                y + 4,
                esc(&p.label)
            );
        }
        s.push_str("</svg>");
        s
    }

    /// A standalone HTML page: a title, the diagram and the steps as text, numbered from 0
    /// as the diagram's rows are, each with its `details` (what the step output, the
    /// sites' states after it) as a list under it (opens in any browser, no server).
    pub fn html(&self, title: &str, steps: &[String], details: &[Vec<String>]) -> String {
        let mut s = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
             <title>{t}</title><style>body{{font-family:sans-serif;margin:1.5em}}\
             ol{{font-family:monospace}}</style></head><body><h1>{t}</h1>\n",
            t = esc(title)
        );
        s.push_str(&self.svg());
        s.push_str("\n<h2>Steps</h2>\n<ol start=\"0\">\n");
        for (k, st) in steps.iter().enumerate() {
            let _ = write!(s, "<li value=\"{k}\">{}", esc(st));
            if let Some(lines) = details.get(k).filter(|d| !d.is_empty()) {
                s.push_str("<ul class=\"details\">");
                for l in lines {
                    let _ = write!(s, "<li>{}</li>", esc(l));
                }
                s.push_str("</ul>");
            }
            s.push_str("</li>\n");
        }
        s.push_str("</ol>\n</body></html>\n");
        s
    }
}
