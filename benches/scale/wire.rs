//! The API's two wire formats, JSON and protobuf, from one emulator in the same run: at 30k
//! services (1k with `--smoke`), the Services and EndpointSlices lists and a watch of 2,000
//! EndpointSlice changes, each read by a JSON client and a protobuf client at once. Measured
//! per object or event: the bytes the client reads (a list's body over its items; an event's
//! line or frame, length prefix included) and the time to decode it into the model's change
//! (the event or page, the object, the model's validation: the daemon's path). Both formats
//! must decode to the same changes. `-- --wire-only` runs it alone, three runs by default.

use super::common::Scratch;
use super::common::emulator::{Emulator, tls_agent};
use super::synth::{self, Case};
use kube_nftproxy::kube::protobuf;
use kube_nftproxy::model::{ApiObject, ObjectChange, ObjectKind};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

/// The two clients' `Accept` headers, as client-go sends them.
const FORMATS: [(&str, &str); 2] =
    [("json", "application/json"), ("protobuf", "application/vnd.kubernetes.protobuf, */*")];

/// EndpointSlice changes watched.
const WATCHED: u32 = 2000;

/// The lists, by resource path and kind.
const LISTS: [(&str, &str, ObjectKind); 2] = [
    ("services", "/api/v1/services", ObjectKind::Service),
    ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices", ObjectKind::EndpointSlice),
];

/// Validates one decoded object as the reflector does.
fn change(obj: &ApiObject) -> Option<ObjectChange> {
    ObjectChange::from_api(obj, "node-a").expect("a valid object")
}

fn json_object(kind: ObjectKind, raw: &str) -> ApiObject {
    match kind {
        ObjectKind::Service => ApiObject::Service(Box::new(serde_json::from_str(raw).expect("service"))),
        _ => ApiObject::EndpointSlice(Box::new(serde_json::from_str(raw).expect("slice"))),
    }
}

/// A list body decoded into changes, in the format its media type says.
fn decode_list(kind: ObjectKind, proto: bool, body: &[u8]) -> Vec<Option<ObjectChange>> {
    if proto {
        let page = protobuf::list_page(&protobuf::open(body).expect("envelope").raw).expect("list");
        return page.items.iter().map(|i| change(&protobuf::object(kind, i).expect("object"))).collect();
    }
    #[derive(serde::Deserialize)]
    struct Page<'a> {
        #[serde(borrow)]
        items: Vec<&'a RawValue>,
    }
    let page: Page = serde_json::from_slice(body).expect("list");
    page.items.iter().map(|i| change(&json_object(kind, i.get()))).collect()
}

/// One watch event (a line or a frame without its prefix) decoded into its change.
fn decode_event(proto: bool, event: &[u8]) -> Option<ObjectChange> {
    if proto {
        let (_, object) = protobuf::watch_event(event).expect("event");
        let raw = protobuf::open(&object).expect("envelope").raw;
        return change(&protobuf::object(ObjectKind::EndpointSlice, &raw).expect("object"));
    }
    #[derive(serde::Deserialize)]
    struct Event<'a> {
        #[serde(borrow)]
        object: &'a RawValue,
    }
    let e: Event = serde_json::from_slice(event).expect("event");
    change(&json_object(ObjectKind::EndpointSlice, e.object.get()))
}

/// Times `f` over `items`, per item in microseconds.
fn per_item<T, R>(items: &[T], f: impl Fn(&T) -> R) -> (Vec<R>, f64) {
    let t = Instant::now();
    let out: Vec<R> = items.iter().map(f).collect();
    (out, t.elapsed().as_secs_f64() * 1e6 / items.len().max(1) as f64)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Reads `count` watch events off a body: lines, or frames (their prefix counted in the bytes).
fn read_events(body: ureq::Body, proto: bool, count: u32) -> (Vec<Vec<u8>>, usize) {
    let mut reader = BufReader::new(body.into_reader());
    let (mut events, mut bytes) = (Vec::new(), 0);
    while events.len() < count as usize {
        let mut event = Vec::new();
        if proto {
            let mut head = [0u8; 4];
            reader.read_exact(&mut head).expect("frame head");
            event.resize(u32::from_be_bytes(head) as usize, 0);
            reader.read_exact(&mut event).expect("frame");
            bytes += 4 + event.len();
        } else {
            bytes += reader.read_until(b'\n', &mut event).expect("line");
        }
        // Bookmarks are not changes; the emulator sends them once a minute.
        if event.windows(8).any(|w| w == b"BOOKMARK") {
            continue;
        }
        events.push(event);
    }
    (events, bytes)
}

/// Runs both formats against one emulator holding `case`.
pub fn run(case: &Case) -> Value {
    let dir = Scratch::new("wire");
    let manifest = dir.0.join("cluster.json");
    super::churn::write_manifest(case, 0, &manifest);
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&manifest), &[]);
    let agent = tls_agent(&emu.tls_dir, true);
    let get = |path: &str, accept: &str| {
        let resp = agent.get(format!("{}{path}", emu.api)).header("Accept", accept).call().expect("answer");
        let proto = protobuf::is_protobuf(resp.body().mime_type());
        (proto, resp.into_body())
    };
    let mut out = json!({"case": case.name, "watched": WATCHED});
    for (res, path, kind) in LISTS {
        let mut decoded = Vec::new();
        for (name, accept) in FORMATS {
            let (proto, mut body) = get(path, accept);
            assert_eq!(proto, name == "protobuf", "{name} answered in the other format");
            let body = body.with_config().limit(1 << 30).read_to_vec().expect("list body");
            let (changes, us) = per_item(&[body.as_slice()], |b| decode_list(kind, proto, b));
            let n = changes[0].len();
            out[name][res] = json!({"objects": n, "bytes_per_object": round(body.len() as f64 / n as f64),
                                     "decode_us_per_object": round(us / n as f64)});
            decoded.push(changes);
        }
        assert_eq!(decoded[0], decoded[1], "{res}: the formats decode to different changes");
    }
    let rv = emu.rv();
    let path = format!("/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={rv}");
    let readers: Vec<_> = FORMATS
        .iter()
        .map(|(name, accept)| {
            let (proto, body) = get(&path, accept);
            assert_eq!(proto, *name == "protobuf");
            std::thread::spawn(move || read_events(body, proto, WATCHED))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let changed: Vec<Value> =
        (0..WATCHED).map(|i| synth::slice_json(case, i % case.services, 1 + i / case.services)).collect();
    for batch in changed.chunks(200) {
        emu.apply(&Value::Array(batch.to_vec()));
    }
    let mut decoded = Vec::new();
    for ((name, _), reader) in FORMATS.iter().zip(readers) {
        let (events, bytes) = reader.join().expect("watch reader");
        let (changes, us) = per_item(&events, |e| decode_event(*name == "protobuf", e));
        out[*name]["watch"] = json!({"events": events.len(), "bytes_per_event": round(bytes as f64 / events.len() as f64),
                                      "decode_us_per_event": round(us)});
        decoded.push(changes);
    }
    assert_eq!(decoded[0], decoded[1], "watch: the formats decode to different changes");
    drop(dir);
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    out
}

/// Prints the runs combined: median and spread of every figure, per format.
pub fn print(runs: &[Value]) {
    let c = super::runs::combine(runs);
    let cell = |path: &[&str]| super::runs::spread(&c, path);
    println!(
        "wire formats at {} ({} runs; median (lowest–highest)):",
        c["median"]["case"].as_str().unwrap_or("?"),
        runs.len()
    );
    println!(
        "| | Services list B/object | µs/object | EndpointSlices list B/object | µs/object | slice watch B/event | µs/event |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, _) in FORMATS {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            cell(&[name, "services", "bytes_per_object"]),
            cell(&[name, "services", "decode_us_per_object"]),
            cell(&[name, "endpointslices", "bytes_per_object"]),
            cell(&[name, "endpointslices", "decode_us_per_object"]),
            cell(&[name, "watch", "bytes_per_event"]),
            cell(&[name, "watch", "decode_us_per_event"]),
        );
    }
    super::runs::write("wire.json", &c);
}
