use super::nack::go_duration;
use super::*;
use serde_json::json;

fn doc(v: Value) -> Result<Asset, DesiredError> {
    from_document(&v, "f.json")
}

#[test]
fn stream_json_bare_or_under_config_and_buckets_by_their_stream_name() {
    let a = doc(json!({"name": "ORDERS", "subjects": ["orders.>"], "max_age": 5})).unwrap();
    assert_eq!(
        (a.kind, a.name.as_str(), a.stream.as_str()),
        (AssetKind::Stream, "ORDERS", "ORDERS")
    );
    let b =
        doc(json!({"config": {"name": "KV_cfg", "max_msgs_per_subject": 5}, "state": {}})).unwrap();
    assert_eq!((b.kind, b.name.as_str()), (AssetKind::Kv, "cfg"));
    assert!(!b.settings.contains_key("state"));
    let e = doc(json!({"name": "ORDERS", "max_agee": 5})).unwrap_err();
    assert!(e.to_string().contains("f.json") && e.to_string().contains("max_agee"), "{e}");
    let e = doc(json!({"name": "ORDERS", "storage": "disk"})).unwrap_err();
    assert!(e.to_string().contains("file or memory"), "{e}");
    let e = doc(json!({"name": "ORDERS", "subjects": "orders.>"})).unwrap_err();
    assert!(e.to_string().contains("server's type"), "{e}");
    assert!(doc(json!({"subjects": []})).unwrap_err().to_string().contains("no `name`"));
}

#[test]
fn nack_fields_map_to_stream_settings_and_unknown_ones_are_named() {
    let s = json!({"apiVersion": "jetstream.nats.io/v1beta2", "kind": "Stream", "metadata": {"name": "x"},
        "spec": {"name": "ORDERS", "subjects": ["o.>"], "maxAge": "1h30m", "replicas": 3, "allowRollup": true,
                 "duplicateWindow": "2m", "preventDelete": true, "sources": [{"name": "A", "externalApiPrefix": "$JS.h.API"}]}});
    let a = doc(s.clone()).unwrap();
    assert_eq!(a.settings["max_age"], json!(5_400_000_000_000i64));
    assert_eq!(a.settings["num_replicas"], json!(3));
    assert_eq!(a.settings["allow_rollup_hdrs"], json!(true));
    assert_eq!(a.settings["duplicate_window"], json!(120_000_000_000i64));
    assert_eq!(a.settings["sources"], json!([{"name": "A", "external": {"api": "$JS.h.API"}}]));
    let mut bad = s.clone();
    bad["spec"]["maxAgee"] = json!("1h");
    let e = doc(bad).unwrap_err().to_string();
    assert!(e.contains("Stream spec.maxAgee is not a field") && e.contains("maxAge"), "{e}");
    let mut conn = s;
    conn["spec"]["servers"] = json!(["nats://x"]);
    assert!(doc(conn).unwrap_err().to_string().contains("--server"));
    let kv = json!({"apiVersion": "jetstream.nats.io/v1beta2", "kind": "KeyValue",
        "spec": {"bucket": "cfg", "history": 10, "ttl": "24h", "compression": true, "storage": "memory"}});
    let k = doc(kv).unwrap();
    assert_eq!((k.kind, k.stream.as_str()), (AssetKind::Kv, "KV_cfg"));
    assert_eq!(k.settings["max_msgs_per_subject"], json!(10));
    assert_eq!(k.settings["compression"], json!("s2"));
    let c = k.create_config();
    assert_eq!(c["subjects"], json!(["$KV.cfg.>"]));
    assert_eq!(c["duplicate_window"], json!(120_000_000_000i64), "the TTL is longer than 2m");
    assert_eq!((c["deny_delete"].clone(), c["discard"].clone()), (json!(true), json!("new")));
    let e = doc(json!({"apiVersion": "jetstream.nats.io/v1beta2", "kind": "Consumer", "spec": {}}));
    assert!(e.unwrap_err().to_string().contains("Consumer"));
}

#[test]
fn go_durations() {
    assert_eq!(go_duration("90s"), Some(90_000_000_000));
    assert_eq!(go_duration("1.5h"), Some(5_400_000_000_000));
    assert_eq!(go_duration("300ms"), Some(300_000_000));
    assert_eq!(go_duration("0"), Some(0));
    for bad in ["", "1d", "-1s", "h", "1 h"] {
        assert_eq!(go_duration(bad), None, "{bad}");
    }
}

#[test]
fn judged_by_what_the_server_updates() {
    let cur = json!({"name": "A", "subjects": ["a.>"], "storage": "file", "retention": "limits", "max_age": 0,
        "metadata": {"_nats.ver": "2.15.1", "team": "x"}, "sources": [{"name": "S", "filter_subject": ""}]});
    let asset = |s: Value| doc(s).unwrap();
    let a = asset(
        json!({"name": "A", "subjects": ["a.>"], "metadata": {"team": "x"}, "sources": [{"name": "S"}]}),
    );
    assert_eq!(judge(&a, Some(&cur)), Needs::Unchanged);
    assert_eq!(judge(&a, None), Needs::Create);
    let zeros = asset(json!({"name": "A", "first_seq": 0, "description": "", "sealed": false}));
    assert_eq!(judge(&zeros, Some(&cur)), Needs::Unchanged, "zero values the server omits");
    let Needs::Update(ch) = judge(&asset(json!({"name": "A", "max_age": 60})), Some(&cur)) else {
        panic!()
    };
    assert_eq!(ch, vec![Change { field: "max_age".into(), current: json!(0), desired: json!(60) }]);
    let n = judge(&asset(json!({"name": "A", "storage": "memory", "max_age": 60})), Some(&cur));
    let Needs::InPlace { changes, refused_by_server } = n else { panic!("{n:?}") };
    assert_eq!(changes.len(), 2);
    assert_eq!(refused_by_server[0].0, "storage");
    let m = judge(&asset(json!({"name": "A", "mirror": {"name": "S"}})), Some(&cur));
    assert!(
        matches!(m, Needs::Refused { ref reason, .. } if reason.starts_with("mirror")),
        "{m:?}"
    );
    let mut p = asset(json!({"name": "A", "max_age": 60}));
    p.prevent_update = true;
    assert!(matches!(judge(&p, Some(&cur)), Needs::Refused { .. }));
}

#[test]
fn globs_and_selection() {
    assert!(glob("ORDERS*", "ORDERS_EU"));
    assert!(glob("*", ""));
    assert!(glob("a*b*c", "axxbyyc"));
    assert!(!glob("a*b*c", "axxc"));
    assert!(!glob("ORDERS", "ORDERS_EU"));
    assert!(glob("*_EU", "ORDERS_EU"));
    let s = |o: &[&str], e: &[&str]| {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        selected("cfg", "KV_cfg", &v(o), &v(e))
    };
    assert!(s(&[], &[]));
    assert!(s(&["KV_*"], &[]));
    assert!(s(&["cfg"], &[]));
    assert!(!s(&["ORDERS*"], &[]));
    assert!(!s(&[], &["KV_*"]));
}

#[test]
fn buckets_with_the_nats_cli_option_names() {
    let k = doc(json!({"kv": "cfg", "history": 10, "ttl": "24h", "storage": "memory", "max-value-size": "1KiB"})).unwrap();
    assert_eq!((k.kind, k.stream.as_str()), (AssetKind::Kv, "KV_cfg"));
    assert_eq!(k.settings["max_msgs_per_subject"], json!(10));
    assert_eq!(k.settings["max_age"], json!(86_400_000_000_000i64));
    assert_eq!(k.settings["max_msg_size"], json!(1024));
    let o = doc(json!({"obj": "files", "replicas": 3})).unwrap();
    assert_eq!((o.stream.as_str(), o.settings["num_replicas"].clone()), ("OBJ_files", json!(3)));
    let e = doc(json!({"kv": "cfg", "histori": 10})).unwrap_err().to_string();
    assert!(e.contains("f.json") && e.contains("histori") && e.contains("history"), "{e}");
    let e = doc(json!({"kv": "cfg", "history": 100})).unwrap_err().to_string();
    assert!(e.contains("1 to 64"), "{e}");
}
