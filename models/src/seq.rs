//! Message sequence diagrams of a path, as SVG: one vertical line per site, one row per
//! step; a delivered message is an arrow from its sender to its receiver, a local step
//! (a user operation, a latch) a labelled dot on its site's line. Every model's
//! `Model::as_svg` draws one, and `hilock replay --svg/--html` writes one to a file.

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
    },
    /// A local step at lane `at`.
    Local {
        /// The lane.
        at: usize,
        /// What happened.
        label: String,
    },
}

/// A sequence diagram: the lanes (site names) and the events, top to bottom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagram {
    /// Lane names, left to right.
    pub lanes: Vec<String>,
    /// Events, top to bottom.
    pub events: Vec<Event>,
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
        }
    }

    /// Adds a delivered message.
    pub fn message(&mut self, from: usize, to: usize, label: impl Into<String>) {
        self.events.push(Event::Message {
            from,
            to,
            label: label.into(),
        });
    }

    /// Adds a local step.
    pub fn local(&mut self, at: usize, label: impl Into<String>) {
        self.events.push(Event::Local {
            at,
            label: label.into(),
        });
    }

    fn x(&self, lane: usize) -> usize {
        LEFT + lane.min(self.lanes.len().saturating_sub(1)) * LANE
    }

    /// The diagram as a standalone SVG document (dark text on a light background, so that
    /// it reads in the Explorer's dark pane and in a browser alike).
    pub fn svg(&self) -> String {
        let width = LEFT + self.lanes.len().saturating_sub(1) * LANE + 190;
        let height = TOP + (self.events.len() + 1) * ROW + 10;
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
                Event::Message { from, to, label } if from != to => {
                    let (x1, x2) = (self.x(*from), self.x(*to));
                    let mid = (x1 + x2) / 2;
                    let _ = write!(
                        s,
                        "<line class=\"msg\" x1=\"{x1}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" \
                         stroke=\"#1f4e9c\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\
                         <text x=\"{mid}\" y=\"{}\" text-anchor=\"middle\" fill=\"#1f4e9c\">{}</text>",
                        y - 4,
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
        s.push_str("</svg>");
        s
    }

    /// A standalone HTML page: a title, the diagram and the steps as text (opens in any
    /// browser, no server).
    pub fn html(&self, title: &str, steps: &[String]) -> String {
        let mut s = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
             <title>{t}</title><style>body{{font-family:sans-serif;margin:1.5em}}\
             ol{{font-family:monospace}}</style></head><body><h1>{t}</h1>\n",
            t = esc(title)
        );
        s.push_str(&self.svg());
        s.push_str("\n<h2>Steps</h2>\n<ol start=\"0\">\n");
        for st in steps {
            let _ = writeln!(s, "<li>{}</li>", esc(st));
        }
        s.push_str("</ol>\n</body></html>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let html = d.html("t & u", &["0. n1 acquire R".into()]);
        assert!(html.contains("<title>t &amp; u</title>") && html.contains("<li>0. n1"));
    }
}
