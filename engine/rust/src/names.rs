//! Destination names: a stable mapping of stream (table) and column names
//! to names the destination accepts, by its naming rules. A name once given
//! never changes (it is saved in the state), even if the rules change;
//! collisions get the suffixes `_2`, `_3`, ... in the order names are given,
//! which is deterministic (columns in schema order, streams in push order).

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

/// The destination's naming rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// The longest name in bytes; 0 for no limit.
    pub max_len: usize,
    /// "lower", "upper" or "" (keep).
    pub case: Case,
    /// Only ASCII letters, digits and '_' (others become '_'), and no
    /// leading digit (a '_' is put in front).
    pub simple: bool,
    /// Names the destination reserves, compared case-insensitively; a name
    /// that is one gets a '_' appended.
    pub reserved: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Case {
    #[default]
    Keep,
    Lower,
    Upper,
}

impl Rules {
    /// Whether the rules change anything. Without rules, column names
    /// pass through except that a name equal to an earlier one ignoring
    /// case gets a suffix (readers of Parquet and Iceberg fold case), and
    /// no table name is given.
    pub fn active(&self) -> bool {
        self.max_len > 0 || self.case != Case::Keep || self.simple || !self.reserved.is_empty()
    }

    /// The base name for `name`, before collision suffixes.
    pub fn base(&self, name: &str) -> String {
        let mut s: String = match self.case {
            Case::Keep => name.to_string(),
            Case::Lower => name.to_lowercase(),
            Case::Upper => name.to_uppercase(),
        };
        if self.simple {
            s = s
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if s.is_empty() || s.as_bytes()[0].is_ascii_digit() {
                s.insert(0, '_');
            }
        }
        if s.is_empty() {
            s.push('_');
        }
        if self.reserved.iter().any(|r| r.eq_ignore_ascii_case(&s)) {
            s.push('_');
        }
        truncate(&mut s, self.max_len);
        s
    }

    /// `base` made unique against `taken` (compared case-insensitively).
    pub fn unique(&self, base: &str, taken: &HashSet<String>) -> String {
        if !taken.contains(&base.to_lowercase()) {
            return base.to_string();
        }
        for k in 2u64.. {
            let suffix = format!("_{k}");
            let mut b = base.to_string();
            if self.max_len > 0 {
                truncate(&mut b, self.max_len.saturating_sub(suffix.len()));
            }
            b.push_str(&suffix);
            if !taken.contains(&b.to_lowercase()) {
                return b;
            }
        }
        unreachable!("u64 suffixes exhausted")
    }
}

fn truncate(s: &mut String, max: usize) {
    if max == 0 || s.len() <= max {
        return;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
}

/// One stream's given names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamNames {
    pub table: Option<String>,
    /// Source column → destination column, in the order given.
    pub columns: Vec<(String, String)>,
    index: HashMap<String, usize>,
    taken: HashSet<String>,
}

impl StreamNames {
    /// The destination name of column `src`, giving one if it has none.
    /// `reserved` are names the engine's own columns hold.
    pub fn column(&mut self, rules: &Rules, src: &str, reserved: &[&str]) -> &str {
        if let Some(&i) = self.index.get(src) {
            return &self.columns[i].1;
        }
        if self.taken.is_empty() {
            self.taken.extend(reserved.iter().map(|r| r.to_lowercase()));
        }
        let dest = rules.unique(&rules.base(src), &self.taken);
        self.taken.insert(dest.to_lowercase());
        self.index.insert(src.to_string(), self.columns.len());
        self.columns.push((src.to_string(), dest));
        &self.columns[self.columns.len() - 1].1
    }

    pub fn get(&self, src: &str) -> Option<&str> {
        self.index.get(src).map(|&i| self.columns[i].1.as_str())
    }

    pub fn to_json(&self) -> Value {
        json!({
            "table": self.table,
            "columns": self.columns.iter().map(|(s, d)| json!([s, d])).collect::<Vec<_>>(),
        })
    }

    pub fn from_json(v: &Value, reserved: &[&str]) -> Option<StreamNames> {
        let mut n = StreamNames {
            table: match v.get("table")? {
                Value::Null => None,
                t => Some(t.as_str()?.to_string()),
            },
            ..StreamNames::default()
        };
        n.taken.extend(reserved.iter().map(|r| r.to_lowercase()));
        for p in v.get("columns")?.as_array()? {
            let p = p.as_array()?;
            let (s, d) = (p.first()?.as_str()?, p.get(1)?.as_str()?);
            if !n.taken.insert(d.to_lowercase()) || n.index.contains_key(s) {
                return None;
            }
            n.index.insert(s.to_string(), n.columns.len());
            n.columns.push((s.to_string(), d.to_string()));
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_collisions() {
        let r = Rules {
            max_len: 10,
            case: Case::Lower,
            simple: true,
            reserved: vec!["select".into(), "order".into()],
        };
        assert_eq!(r.base("Order"), "order_");
        assert_eq!(r.base("SELECT"), "select_");
        assert_eq!(r.base("first name"), "first_name");
        assert_eq!(r.base("1st"), "_1st");
        assert_eq!(r.base("très_long_nom"), "tr_s_long_");
        assert_eq!(r.base(""), "_");
        let mut n = StreamNames::default();
        let meta = ["_openetl_id"];
        assert_eq!(n.column(&r, "Name", &meta), "name");
        assert_eq!(n.column(&r, "NAME", &meta), "name_2");
        assert_eq!(n.column(&r, "name", &meta), "name_3");
        assert_eq!(n.column(&r, "Name", &meta), "name", "stable");
        assert_eq!(n.column(&r, "a_very_long_name_1", &meta), "a_very_lon");
        assert_eq!(n.column(&r, "a_very_long_name_2", &meta), "a_very_l_2");
        let keep = Rules {
            max_len: 0,
            ..Rules::default()
        };
        let mut m = StreamNames::default();
        assert_eq!(
            m.column(&keep, "_openetl_id", &["_openetl_id"]),
            "_openetl_id_2"
        );
        let back = StreamNames::from_json(&n.to_json(), &meta).unwrap();
        assert_eq!(back, n);
    }
}
