//! The library's layers hold: every `crate::` path in non-test code names its own layer or one
//! below (`services` → `modes` → `engine` → `decode` → `model` → `base`, as `src/lib.rs` says),
//! the modules of one layer import each other without a circle, and nothing but tests names
//! `dev`. Comments and test code are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Lowest first.
const LAYERS: &[&str] = &["base", "model", "decode", "engine", "modes", "services"];
/// What `lib.rs` re-exports at the root, by layer.
const ROOT_NAMES: &[(&str, &str)] =
    &[("Error", "base"), ("Result", "base"), ("Config", "model"), ("IngestPipeline", "services"), ("Summary", "services")];

/// Where a file or a `crate::` path stands: its layer and its module in that layer.
fn place(parts: &[&str]) -> Option<(usize, String)> {
    let first = *parts.first()?;
    if let Some((_, layer)) = ROOT_NAMES.iter().find(|(name, _)| *name == first) {
        return Some((LAYERS.iter().position(|l| l == layer)?, first.to_string()));
    }
    let layer = LAYERS.iter().position(|l| *l == first)?;
    let module = parts.get(1).map(|m| m.trim_end_matches(".rs").to_string()).unwrap_or_default();
    Some((layer, module))
}

/// The code of a file without comments and without its `#[cfg(test)]` items.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut depth = 0i64;
    let mut test_next = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skip_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        let opens = code.matches('{').count() as i64;
        let closes = code.matches('}').count() as i64;
        if test_next && !trimmed.is_empty() && !trimmed.starts_with("#[") {
            test_next = false;
            if opens > closes {
                skip_depth = Some(depth);
            }
            depth += opens - closes;
            continue;
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every layer rule a set of `(path under src, text)` files breaks, one line each.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    let mut edges: BTreeMap<(usize, String), BTreeSet<String>> = BTreeMap::new();
    for (path, text) in files {
        let parts: Vec<&str> = path.split('/').collect();
        let name = parts.last().copied().unwrap_or("");
        if parts.contains(&"tests") || name == "tests.rs" || name.ends_with("_tests.rs") || parts[0] == "testkit.rs" || parts[0] == "lib.rs"
        {
            continue;
        }
        let dev = parts[0] == "dev";
        let Some((layer, module)) = place(&parts) else {
            if !dev {
                found.push(format!("{path}: not in a layer folder ({})", LAYERS.join(", ")));
            }
            continue;
        };
        let code = code_of(text);
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let target = path_of(rest);
            if target.first() == Some(&"dev") {
                found.push(format!("{path}: imports crate::dev (dev tooling is for tests and the CLI only)"));
                continue;
            }
            if dev {
                continue;
            }
            let Some((to_layer, to_module)) = place(&target) else { continue };
            if to_layer > layer {
                found.push(format!(
                    "{path}: {} imports {} (upward: {} → {})",
                    LAYERS[layer],
                    target.join("::"),
                    LAYERS[layer],
                    LAYERS[to_layer]
                ));
            } else if to_layer == layer && to_module != module && !to_module.is_empty() {
                edges.entry((layer, module.clone())).or_default().insert(to_module);
            }
        }
    }
    for ((layer, module), _) in edges.clone() {
        if let Some(circle) = circle_from(&edges, layer, &module) {
            let line = format!("{}: circle {}", LAYERS[layer], circle.join(" → "));
            if !found.contains(&line) {
                found.push(line);
            }
        }
    }
    found
}

/// A path from `start` back to itself among one layer's modules, smallest name first.
fn circle_from(edges: &BTreeMap<(usize, String), BTreeSet<String>>, layer: usize, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![start.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in edges.get(&(layer, last.clone())).into_iter().flatten() {
            if next == start {
                let mut circle = path.clone();
                circle.push(start.to_string());
                // Report each circle once: from its smallest module.
                return (path.iter().min().map(|m| m.as_str()) == Some(start)).then_some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

/// The first two segments of a path: `engine::commit` of `engine::commit::Committer`.
fn path_of(text: &str) -> Vec<&str> {
    let ident = |t: &str| t.find(|c: char| !c.is_alphanumeric() && c != '_').unwrap_or(t.len());
    let first = &text[..ident(text)];
    let after = &text[first.len()..];
    match after.strip_prefix("::") {
        Some(rest) if rest.starts_with(|c: char| c.is_alphabetic()) => vec![first, &rest[..ident(rest)]],
        _ => vec![first],
    }
}

fn read_tree(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_tree(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn imports_run_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&src, &src, &mut files);
    assert!(files.len() > 100, "read {} files under {}", files.len(), src.display());
    let found = violations(&files);
    assert!(found.is_empty(), "the layers do not hold:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_upward_imports_circles_and_dev() {
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let found = violations(&[
        file("engine/commit/mod.rs", "use crate::services::metrics::emf;\n// use crate::services::x\n"),
        file("engine/writer.rs", "use crate::engine::catalog::Catalog;\nuse crate::model::tables::TableDef;\n"),
        file("engine/catalog.rs", "fn f(w: crate::engine::writer::W) {}\n"),
        file("modes/sink.rs", "use crate::dev::codec;\n#[cfg(test)]\nmod tests {\n    use crate::services::ingest;\n}\n"),
        file("base/error.rs", "pub type R = crate::Result<()>;\nfn g() -> crate::Config {}\n"),
        file("stray.rs", ""),
    ]);
    assert_eq!(
        found,
        [
            "engine/commit/mod.rs: engine imports services::metrics (upward: engine → services)",
            "modes/sink.rs: imports crate::dev (dev tooling is for tests and the CLI only)",
            "base/error.rs: base imports Config (upward: base → model)",
            "stray.rs: not in a layer folder (base, model, decode, engine, modes, services)",
            "engine: circle catalog → writer → catalog",
        ]
    );
}

#[test]
fn no_function_ships_dev_tooling() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut functions: Vec<String> =
        std::fs::read_dir(root.join("functions")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    functions.sort();
    assert!(!functions.is_empty());
    for function in &functions {
        let out = std::process::Command::new(&cargo)
            .current_dir(&root)
            .args(["tree", "--offline", "-p", function, "-e", "features", "-i", "icestream", "--prefix", "none"])
            .output()
            .unwrap();
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && tree.contains("icestream feature \"default\""),
            "cargo tree -p {function}: {}{tree}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!tree.contains("icestream feature \"dev\""), "function {function} builds the library with dev tooling:\n{tree}");
        assert!(
            !tree.contains("icestream feature \"fault-injection\""),
            "function {function} builds the library with fault injection:\n{tree}"
        );
    }
}
