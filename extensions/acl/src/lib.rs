//! The `acl` access-control extension (a black-box graft): may a program use this remote
//! object (named by its URL, `dav://host/dir/f`)? The policy's arguments are rules
//! `allow=PATTERN` and `deny=PATTERN`, tried in order, the first that matches decides; an
//! object no rule matches is allowed. A pattern is a whole URL (`dav://h/notes.txt`), a
//! prefix (`dav://h/private/*`) or a suffix (`*.key`).

use roam_ext_abi::{Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Query { name, args, .. } => decide(&name, &args),
        _ => Reply::Fail("acl only decides access".into()),
    }
}

fn decide(name: &str, rules: &[(String, String)]) -> Reply {
    for (verdict, pattern) in rules {
        if matches(pattern, name) {
            return match verdict.as_str() {
                "allow" => Reply::Match(true),
                "deny" => Reply::Match(false),
                other => Reply::Fail(format!("a rule is allow= or deny=, not {other}=")),
            };
        }
    }
    Reply::Match(true)
}

fn matches(pattern: &str, name: &str) -> bool {
    match (pattern.strip_prefix('*'), pattern.strip_suffix('*')) {
        (Some(suffix), _) => name.ends_with(suffix),
        (None, Some(prefix)) => name.starts_with(prefix),
        (None, None) => name == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(v: &str, p: &str) -> (String, String) {
        (v.into(), p.into())
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let rules = [
            rule("allow", "/w/public.key"),
            rule("deny", "*.key"),
            rule("deny", "/w/private/*"),
        ];
        assert_eq!(decide("/w/a.key", &rules), Reply::Match(false));
        assert_eq!(decide("/w/public.key", &rules), Reply::Match(true));
        assert_eq!(decide("/w/private/x", &rules), Reply::Match(false));
        assert_eq!(decide("/w/notes.txt", &rules), Reply::Match(true));
        assert!(matches!(
            decide("/w/a", &[rule("maybe", "*")]),
            Reply::Fail(_)
        ));
    }
}
