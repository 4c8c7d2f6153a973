//! The table at the head of `src/properties/mod.rs` is the index of the harness's
//! properties: it must name every property (by the name violations report) and link every
//! property file, and every file under `src/properties/` must be one of its rows.

use hilock_harness::properties;
use std::path::Path;

/// The name of every property the harness checks, as violations report it.
const NAMES: [&str; 13] = [
    properties::P1,
    properties::P2,
    properties::P3,
    properties::P3B,
    properties::P4,
    properties::NO_ERROR,
    properties::FENCE,
    properties::P11,
    properties::P12,
    properties::P14,
    properties::P15,
    properties::P16,
    properties::P17,
];

#[test]
fn the_table_names_every_property_and_links_every_property_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/properties");
    let doc = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("//! | ["))
        .collect();
    assert_eq!(rows.len(), NAMES.len(), "one row per property");
    for name in NAMES {
        assert!(
            rows.iter().any(|r| r.starts_with(&format!("{name}]("))),
            "no row for {name}"
        );
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f != "mod.rs")
        .collect();
    files.sort();
    assert_eq!(files.len(), rows.len(), "one file per property: {files:?}");
    for f in files {
        let module = f.strip_suffix(".rs").unwrap();
        assert!(
            rows.iter().any(|r| r.contains(&format!("]({module})"))),
            "{f} is not linked from the table"
        );
    }
}
