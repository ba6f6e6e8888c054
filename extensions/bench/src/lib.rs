//! The `bench` extension: the computations of Small & Seltzer's tables, as `Compute` ops.
//! `noop` (upcall cost: answers an empty reply) and `md5` (Table 5: digest of the data).

use roam_ext_abi::{Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    match req {
        Request::Compute { op, data } => match op.as_str() {
            "noop" => Reply::Bytes(Vec::new()),
            "md5" => Reply::Bytes(md5::compute(&data).0.to_vec()),
            _ => Reply::Fail(format!("unknown op {op}")),
        },
        _ => Reply::Fail("bench only computes".into()),
    }
}
