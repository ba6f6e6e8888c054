//! The `hotlist` policy extension (Small & Seltzer's prioritization graft): evict the least
//! recently used candidate that is not on the user's hot list (the policy's args: names or
//! name suffixes such as `.so`); only when every candidate is hot, the least recent of all.

use roam_ext_abi::{Candidate, Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Policy { args, candidates } => pick(&args, &candidates),
        _ => Reply::Fail("hotlist only picks eviction victims".into()),
    }
}

fn pick(hot: &[String], candidates: &[Candidate]) -> Reply {
    let is_hot = |c: &Candidate| {
        hot.iter()
            .any(|h| c.name == *h || c.name.ends_with(h.as_str()))
    };
    let lru = |cold_only: bool| {
        candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| !cold_only || !is_hot(c))
            .min_by_key(|(_, c)| c.last_use)
            .map(|(i, _)| i as u32)
    };
    match lru(true).or_else(|| lru(false)) {
        Some(i) => Reply::Victim(i),
        None => Reply::Fail("no candidates".into()),
    }
}
