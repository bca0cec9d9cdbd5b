use super::super::{event_json, parse_event, parse_event_with_serde};
use super::*;
use crate::model::event::{KafkaRecordIn, TopicPartition};
use bytes::Bytes;

/// The scan's reading of `text`, checked against serde's: `Some` only with the same records.
fn scanned(text: &str) -> Option<crate::model::event::ParsedEvent> {
    let event = scan_event(text)?;
    let scanned = crate::model::event::from_kafka_event(event).unwrap();
    let serde = parse_event_with_serde(text.as_bytes()).unwrap();
    assert_eq!((&scanned.event_source, &scanned.partitions), (&serde.event_source, &serde.partitions), "{text}");
    Some(scanned)
}

/// AWS's example MSK event (Lambda developer guide, "Using Lambda with Amazon MSK").
const AWS_EXAMPLE: &str = r#"{"eventSource":"aws:kafka","eventSourceArn":"arn:aws:kafka:us-east-1:123456789012:cluster/vpc-2priv-2pub/751d2973-a626-431c-9d4e-d7975eb44dd7-2","bootstrapServers":"b-2.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092,b-1.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092","records":{"mytopic-0":[{"topic":"mytopic","partition":0,"offset":15,"timestamp":1545084650987,"timestampType":"CREATE_TIME","key":"abcDEFghiJKLmnoPQRstuVWXyz1234==","value":"SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==","headers":[{"headerKey":[104,101,97,100,101,114,86,97,108,117,101]}]}]}}"#;

#[test]
fn the_mappings_own_events_take_the_scan() {
    let parsed = scanned(AWS_EXAMPLE).expect("AWS's example is in the mapping's form");
    let r = &parsed.partitions[&TopicPartition { topic: "mytopic".into(), partition: 0 }][0];
    assert_eq!(r.headers, Headers::from_iter([("headerKey", b"headerValue")]));
    assert_eq!(r.value.as_deref(), Some(&b"Hello, this is a test."[..]));
    // What the generator and the esm render (keys sorted, nulls, empty lists, negative bytes).
    let text = r#"{"bootstrapServers":null,"eventSource":"SelfManagedKafka","records":{"a-b-3":[{"headers":[],"key":null,"offset":-5,"partition":3,"timestamp":0,"value":"%%"},{"headers":[{"h":[-128,0,127]},{"h":[]}],"offset":9223372036854775807,"partition":3,"timestamp":-9223372036854775808,"topic":"a-b"}],"x-1":[]}}"#;
    let parsed = scanned(text).expect("a rendered event takes the scan");
    let rs = &parsed.partitions[&TopicPartition { topic: "a-b".into(), partition: 3 }];
    assert!(rs[0].value_error.as_deref().is_some_and(|e| e.contains("not base64")), "{rs:?}");
    assert_eq!(rs[1].headers, Headers::from_iter([("h", &[128, 0, 127][..]), ("h", &[])]));
}

#[test]
fn records_whose_fields_change_order_read_as_serde_reads_them() -> Result<(), String> {
    // AWS's order, then sorted (the esm's), then shuffled with fields the scan ignores
    // among them, and a name that only starts like a known one: each record read right
    // whatever the order the one before it taught.
    let records = [
        r#"{"topic":"t","partition":0,"offset":1,"timestamp":5,"timestampType":"CREATE_TIME","key":"YQ==","value":"Yg==","headers":[]}"#,
        r#"{"headers":[{"h":[1]}],"key":null,"offset":2,"partition":0,"timestamp":6,"timestampType":"LOG_APPEND_TIME","topic":"t","value":"Yw=="}"#,
        r#"{"value":"ZA==","extra":7,"offset":3,"timestampTypeX":"x","topic":"t","timestamp":7,"partition":0,"key":"ZQ==","headers":[]}"#,
        r#"{"offset":4,"partition":0,"timestamp":8,"topic":"t"}"#,
        r#"{"topic":"t","partition":0,"offset":5,"timestamp":9,"timestampType":"CREATE_TIME","key":"YQ==","value":"Yg==","headers":[]}"#,
    ];
    let text = format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","));
    let parsed = scanned(&text).ok_or("every record is in the mapping's form")?;
    let rs = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
    assert_eq!(rs.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert_eq!(rs[2].value.as_deref(), Some(&b"d"[..]));
    assert_eq!(rs[2].key.as_deref(), Some(&b"e"[..]));
    assert_eq!(rs[3].value, None);
    // A known field twice is still serde's to name, in any order.
    let twice = text.replace(r#""offset":4,"#, r#""offset":4,"topic":"t","#);
    assert!(scan_event(&twice).is_none());
    Ok(())
}

#[test]
fn a_repeated_header_list_is_shared_and_reads_as_serde_reads_it() -> Result<(), String> {
    // The same list twice, then lists that start like it (a longer value, another header
    // after it), an empty one, a refused one in between (serde's), and the first again.
    let lists = [
        r#"[{"p":[105,99]}]"#,
        r#"[{"p":[105,99]}]"#,
        r#"[{"p":[105,99,1]}]"#,
        r#"[{"p":[105,99]},{"q":[]}]"#,
        r#"[]"#,
        r#"[]"#,
        r#"[{"p":[105,99]}]"#,
    ];
    let record =
        |offset: usize, headers: &str| format!(r#"{{"offset":{offset},"partition":0,"timestamp":1,"topic":"t","headers":{headers}}}"#);
    let text = |lists: &[&str]| {
        let records: Vec<String> = lists.iter().enumerate().map(|(i, h)| record(i, h)).collect();
        format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","))
    };
    let parsed = scanned(&text(&lists)).ok_or("every record is in the mapping's form")?;
    let rs = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
    let value = |i: usize| rs[i].headers.iter().next().map(|(_, v)| v.as_ptr());
    assert_eq!(value(0), value(1), "a repeat shares the list read before it");
    assert_ne!(value(1), value(2));
    assert_ne!(value(0), value(6), "only the last list is remembered");
    assert_eq!(rs[3].headers, Headers::from_iter([("p", &[105, 99][..]), ("q", &[])]));
    assert!(rs[4].headers.is_empty() && rs[5].headers.is_empty());
    // A list the scan refuses is not remembered: the event goes to serde, which names it.
    let refused = text(&[lists[0], r#"[{"p":[300]}]"#, r#"[{"p":[300]}]"#]);
    assert!(scan_event(&refused).is_none());
    Ok(())
}

#[test]
fn a_repeated_topic_or_timestamp_type_reads_as_serde_reads_it() -> Result<(), String> {
    // Each field the same as the record before, then one that starts like it, one it
    // starts like, an empty one, null, and (the timestamp type) a number.
    let fields = [
        ("t", r#""CREATE_TIME""#),
        ("t", r#""CREATE_TIME""#),
        ("tx", r#""CREATE_TIMEX""#),
        ("t", r#""CREATE""#),
        ("t", r#""""#),
        ("t", "null"),
        ("t", "7"),
        ("t", r#""CREATE_TIME""#),
    ];
    let records: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(i, (topic, kind))| format!(r#"{{"offset":{i},"partition":0,"timestamp":1,"timestampType":{kind},"topic":"{topic}"}}"#))
        .collect();
    let text = format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","));
    let parsed = scanned(&text).ok_or("every record is in the mapping's form")?;
    assert_eq!(parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }].len(), 7);
    assert_eq!(parsed.partitions[&TopicPartition { topic: "tx".into(), partition: 0 }][0].offset, 2);
    // An empty topic after "t" is the group's; a topic with an escape, or a timestamp type
    // after the one before it that is not a string, goes to serde.
    let empty = text.replace(r#""topic":"tx""#, r#""topic":"""#);
    assert_eq!(scanned(&empty).ok_or("an empty topic takes the scan")?.partitions.len(), 1);
    for (field, other) in [(r#""topic":"tx""#, r#""topic":"t\u0078""#), (r#""timestampType":"CREATE_TIMEX""#, r#""timestampType":{"a":1}"#)]
    {
        let changed = text.replacen(field, other, 1);
        assert!(changed != text && scan_event(&changed).is_none(), "{changed}");
    }
    Ok(())
}

/// The white space runs the tests put between tokens: JSON's four bytes, alone and mixed.
const SPACES: [&str; 6] = ["", " ", "\n", "\t", "\r\n", " \n\t  \r"];

#[test]
fn white_space_between_tokens_takes_the_scan() -> Result<(), String> {
    let compact = scanned(AWS_EXAMPLE).ok_or("AWS's example takes the scan")?;
    let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(AWS_EXAMPLE).unwrap()).unwrap();
    let mut spaced = vec![
        // A file's trailing newline, leading white space, pretty-printing, a space on either
        // side of a colon (a known field's name before it too), before a comma or a brace.
        format!("{AWS_EXAMPLE}\n"),
        format!("\r\n\t {AWS_EXAMPLE} \n"),
        pretty.clone(),
        format!("{pretty}\n"),
        AWS_EXAMPLE.replace(r#""offset":15,"#, r#""offset": 15,"#),
        AWS_EXAMPLE.replace(r#""offset":15,"#, r#""offset" :15 ,"#),
        AWS_EXAMPLE.replace(r#""offset":15,"#, "\"offset\":15,\n"),
        AWS_EXAMPLE.replace(r#""partition":0,"#, "\"partition\":0\r,"),
        AWS_EXAMPLE.replace(r#""timestampType":"CREATE_TIME""#, "\"timestampType\"\t:\t\"CREATE_TIME\""),
        AWS_EXAMPLE.replace("[104,101,", "[ 104 ,\n101,"),
        AWS_EXAMPLE.replace("]}]}}", "]\n}\n]\n}\n}\n"),
    ];
    // Every run at every place between tokens.
    spaced.extend(SPACES.iter().map(|run| white_spaced(AWS_EXAMPLE, |_| run)));
    for text in &spaced {
        let parsed = scanned(text).ok_or_else(|| format!("the scan refused {text:?}"))?;
        assert_eq!((&parsed.event_source, &parsed.partitions), (&compact.event_source, &compact.partitions), "{text:?}");
        assert!(crate::model::event::takes_fast_path(text.as_bytes()), "{text:?}");
    }
    Ok(())
}

#[test]
fn anything_else_goes_to_serde_with_the_same_result() {
    let mut serde_only = vec![
        // Control characters: other than JSON's white space between tokens, white space
        // inside a number or a literal, raw inside a key, a value, a header's name, an
        // unknown field's name (serde refuses those in strings).
        AWS_EXAMPLE.replace(r#""offset":15,"#, "\"offset\":15,\u{b}"),
        AWS_EXAMPLE.replace(r#""partition":0,"#, "\"partition\":0\u{c},"),
        format!("{AWS_EXAMPLE}\u{0}"),
        AWS_EXAMPLE.replace(r#""offset":15,"#, r#""offset":1 5,"#),
        AWS_EXAMPLE.replace(r#""offset":15,"#, r#""offset":- 15,"#),
        AWS_EXAMPLE.replace("[104,101,", "[1 04,101,"),
        AWS_EXAMPLE.replace(r#""bootstrapServers":"b-2"#, r#""bootstrapServers":nu ll,"b-2"#),
        AWS_EXAMPLE.replace("abcDEF", "abc\u{1}DEF"),
        AWS_EXAMPLE.replace("SGVsbG8s", "SGVsbG8s\u{1f}"),
        AWS_EXAMPLE.replace("headerKey", "header\tKey"),
        AWS_EXAMPLE.replace(r#""timestampType""#, "\"timestamp\u{0}Type\""),
        // An escape, a fraction, an exponent, a leading zero, `-0`.
        AWS_EXAMPLE.replace(r#""topic":"mytopic""#, r#""topic":"my\u0074opic""#),
        AWS_EXAMPLE.replace("1545084650987", "1545084650987.0"),
        AWS_EXAMPLE.replace("1545084650987", "1.5e12"),
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":015"#),
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":-0"#),
        // A duplicate field, an unknown top-level field, an object where a scalar is ignored.
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":15,"offset":16"#),
        AWS_EXAMPLE.replace(r#""eventSource""#, r#""extra":1,"eventSource""#),
        AWS_EXAMPLE.replace(r#""timestampType":"CREATE_TIME""#, r#""timestampType":{"a":1}"#),
        AWS_EXAMPLE.replace(r#""headers""#, r#""valueSchemaMetadata":{"dataFormat":"AVRO","schemaId":"1"},"headers""#),
        // Values serde refuses: a trailing comma in a header, a partition out of range, no
        // partition, a string partition, trailing text (header bytes out of range or not
        // written as JSON writes an integer: below).
        AWS_EXAMPLE.replace(",117,101]", ",117,101,]"),
        AWS_EXAMPLE.replace(r#""partition":0"#, r#""partition":4294967296"#),
        AWS_EXAMPLE.replace(r#""partition":0,"#, ""),
        AWS_EXAMPLE.replace(r#""partition":0"#, r#""partition":"0""#),
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":9223372036854775808"#),
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":-9223372036854775809"#),
        AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":123456789012345678901"#),
        AWS_EXAMPLE.replace(r#""topic":"mytopic""#, "\"topic\":\"my\ttopic\""),
        format!("{AWS_EXAMPLE}x"),
        format!("{AWS_EXAMPLE} x"),
    ];
    let header_bytes =
        ["[300,", "[-129,", "[0104,", "[-0,", "[1.0,", "[,", "[1000,", "[00,", "[+1,", "[--1,", "[1e2,", "[[104],", r#"["h","#];
    serde_only.extend(header_bytes.map(|first| AWS_EXAMPLE.replace("[104,", first)));
    for text in &serde_only {
        assert!(scan_event(text).is_none(), "the scan took {text}");
        let fast = parse_event(text.as_bytes()).map(|p| p.partitions).map_err(|e| e.to_string());
        let serde = parse_event_with_serde(text.as_bytes()).map(|p| p.partitions).map_err(|e| e.to_string());
        assert_eq!(fast, serde, "{text}");
    }
    // Not only errors: an escape, an unknown top-level field are serde's to read.
    assert!(serde_only.iter().filter(|text| parse_event(text.as_bytes()).is_ok()).count() >= 2);
}

fn record_strategy() -> impl proptest::strategy::Strategy<Value = KafkaRecordIn> {
    use proptest::prelude::*;
    let bytes = || proptest::collection::vec(any::<u8>(), 0..24);
    (
        any::<i64>(),
        any::<i64>(),
        proptest::option::of(bytes()),
        proptest::option::of(bytes()),
        proptest::collection::vec(("[a-z\"\\\\é]{0,4}", bytes()), 0..3),
    )
        .prop_map(|(offset, timestamp_ms, key, value, headers)| KafkaRecordIn {
            offset,
            timestamp_ms,
            timestamp_type: None,
            key: key.map(Bytes::from),
            value: value.map(Bytes::from),
            value_error: None,
            headers: Headers::from_iter(headers),
            value_schema: None,
        })
}

#[test]
fn a_string_ends_at_its_first_quote_backslash_or_control_character() {
    // Every length and position across words, among bytes just above and below each and
    // with the high bit set (what a borrow or a missing `& !v` would mark falsely), with more
    // quotes after the first.
    for len in 0..40 {
        for at in 0..=len {
            for end in [b'"', b'\\', 0x00, b'\t', 0x1f] {
                let mut bytes: Vec<u8> = (0..len).map(|i| [b'!', b'#', b']', b'[', 0xa2, 0xdc, b'a', b' ', 0x7f][i % 9]).collect();
                if at < len {
                    bytes[at] = end;
                    bytes.iter_mut().skip(at + 1).step_by(3).for_each(|b| *b = b'"');
                }
                let naive = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                assert_eq!(string_end(&bytes), naive, "{bytes:?}");
            }
        }
    }
}

#[test]
fn starts_with_agrees_with_the_slice_method() {
    // Every prefix length across words, against texts equal to it, one byte off at each
    // position, and shorter or longer.
    let bytes: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
    for n in 0..bytes.len() {
        let prefix = &bytes[..n];
        for text_len in [n.saturating_sub(1), n, n + 1] {
            let text = &bytes[..text_len];
            assert_eq!(starts_with(text, prefix), text.starts_with(prefix), "{n} {text_len}");
        }
        for at in 0..n {
            let mut text = bytes.clone();
            text[at] ^= 0x20;
            assert!(!starts_with(&text, prefix), "{n} {at}");
        }
    }
}

#[test]
fn an_integer_reads_as_serde_reads_it_at_every_length() -> Result<(), String> {
    // 1 to 21 digits each way, the i64 limits and past them, leading zeros; at the end of
    // the text, before a comma or a brace, or before a fraction or an exponent.
    let mut numbers: Vec<String> =
        (1..=21).flat_map(|n| ["9876543210".repeat(3)[..n].to_string(), format!("-{}", &"1234567890".repeat(3)[..n])]).collect();
    numbers.extend(
        ["0", "-0", "00", "01", "-01", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809"]
            .map(String::from),
    );
    for number in &numbers {
        for tail in ["", ",", "}", ",\"offset\":123456789", ".5", "e1", "E1"] {
            let text = format!("{number}{tail}");
            let mut c = Cursor { text: &text, i: 0 };
            let fraction = tail.starts_with(['.', 'e', 'E']);
            let expected = if fraction || number == "-0" { None } else { serde_json::from_str::<i64>(number).ok() };
            if c.integer() != expected {
                return Err(format!("{text:?}: expected {expected:?}"));
            }
            if expected.is_some() && c.i != number.len() {
                return Err(format!("{text:?}: stopped at {}", c.i));
            }
        }
    }
    Ok(())
}

#[test]
fn a_header_byte_is_what_the_integer_reads_in_the_i8_range() {
    // Every number from -1000 to 1000 as written, with leading zeros, `-0`, a fraction, an
    // exponent or more digits after it, and bare signs and empty text.
    let mut texts: Vec<String> = (-1000..=1000).map(|n: i32| n.to_string()).collect();
    for n in ["0", "00", "01", "007", "-0", "-00", "-01", "1", "12", "127", "128", "-128", "-129"] {
        texts.push(n.to_string());
        texts.extend(["]", ",", ".5", "e1", "E1", "0", "9"].iter().map(|tail| format!("{n}{tail}")));
    }
    texts.extend(["", "-", "--1", "+1", "a", " 1"].map(String::from));
    for text in &texts {
        let (mut general, mut byte) = (Cursor { text, i: 0 }, Cursor { text, i: 0 });
        let expected = general.integer().and_then(|v| i8::try_from(v).ok()).map(|v| v as u8);
        assert_eq!(byte.signed_byte(), expected, "{text:?}");
        if expected.is_some() {
            assert_eq!(byte.i, general.i, "{text:?}: where the cursor stops");
        }
    }
}

proptest::proptest! {
    /// Rendered compactly, pretty-printed or with any white space between its tokens, any
    /// event without escapes takes the scan to serde's records (one with escapes goes to
    /// serde, to the same records).
    #[test]
    fn the_scan_reads_what_serde_reads(
        groups in proptest::collection::btree_map(("[a-z.\"é-]{1,8}", 0i32..4), proptest::collection::vec(record_strategy(), 0..4), 0..4),
        runs in proptest::collection::vec(0..SPACES.len(), 1..64),
    ) {
        let partitions = groups.into_iter().map(|((topic, partition), rs)| (TopicPartition { topic, partition }, rs)).collect();
        let json = event_json("aws:kafka", "arn", "b-1:9092", &partitions);
        let compact = json.to_string();
        let pretty = serde_json::to_string_pretty(&json).unwrap();
        let spaced = white_spaced(&compact, |n| SPACES[runs[n % runs.len()]]);
        let via_scan = parse_event(compact.as_bytes()).unwrap();
        for text in [&compact, &pretty, &spaced] {
            if !compact.contains('\\') {
                proptest::prop_assert!(scanned(text).is_some(), "{}", text);
            }
            proptest::prop_assert_eq!(&parse_event(text.as_bytes()).unwrap().partitions, &via_scan.partitions);
        }
    }
}

#[test]
fn white_spaced_puts_runs_between_tokens_only() {
    let json = r#"{"a:b":[1,"x,\"]{"],"c":null}"#;
    let spaced = white_spaced(json, |_| "_");
    assert_eq!(spaced, r#"__{_"a:b"_:__[_1_,_"x,\"]{"_]__,_"c"_:_null_}__"#);
    let mut n = 0;
    white_spaced(json, |k| {
        assert_eq!(k, n, "runs are numbered in order");
        n += 1;
        ""
    });
    assert_eq!(n, 2 + 2 * 8);
}
