//! Lookup joins (`JOIN d FOR SYSTEM_TIME AS OF o.proctime`): each probe row joins the rows
//! of a filesystem table read whole, against results computed here; the table is read
//! again once `lookup.join.cache.ttl` has passed.

use crate::common::*;
use crate::sources::wait_for;

const CURRENCIES: &str = "EUR,Euro,2\nUSD,US Dollar,2\nJPY,Yen,0\nCHF,Swiss Franc,2\n";

#[test]
fn lookup_joins_join_each_row_with_the_table_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let codes = ["EUR", "USD", "JPY", "GBP", "CHF", ""];
    let orders: Vec<(i64, &str)> = (0..600).map(|i| (i, codes[(i * 7 % 6) as usize])).collect();
    let text: String = orders.iter().map(|(i, c)| format!("{i},{c}\n")).collect();
    std::fs::write(tmp.path().join("orders.csv"), text).unwrap();
    std::fs::write(tmp.path().join("currencies.csv"), CURRENCIES).unwrap();
    let out = tmp.path().join("out");
    let sql = render(
        "
CREATE TABLE orders (id BIGINT, currency STRING, pt AS PROCTIME())
WITH ('connector' = 'filesystem', 'path' = '${dir}/orders.csv', 'format' = 'csv');
CREATE TABLE currencies (currency STRING, name STRING, digits INT)
WITH ('connector' = 'filesystem', 'path' = '${dir}/currencies.csv', 'format' = 'csv');
CREATE TABLE named (id BIGINT, name STRING)
WITH ('connector' = 'filesystem', 'path' = '${out}/named', 'format' = 'json');
CREATE TABLE padded (id BIGINT, name STRING, digits INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/padded', 'format' = 'json');
INSERT INTO named
SELECT o.id, c.name FROM orders AS o
JOIN currencies FOR SYSTEM_TIME AS OF o.pt AS c ON o.currency = c.currency;
INSERT INTO padded
SELECT o.id, c.name, c.digits FROM orders AS o
LEFT JOIN currencies FOR SYSTEM_TIME AS OF o.pt AS c
ON o.currency = c.currency AND c.digits > 0;
",
        &[
            ("dir", tmp.path().to_str().unwrap()),
            ("out", out.to_str().unwrap()),
        ],
    );
    let script = write_script(tmp.path(), "lookup.sql", &sql);
    run_ok(&[script.to_str().unwrap(), "-p", "2"]);
    let table: Vec<(&str, &str, i64)> = CURRENCIES
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0], f[1], f[2].parse().unwrap())
        })
        .collect();
    let mut expected = Vec::new();
    for (id, code) in &orders {
        let found = table.iter().find(|(c, _, _)| c == code);
        if let Some((_, name, _)) = found {
            expected.push(format!("named/ {{\"id\":{id},\"name\":\"{name}\"}}"));
        }
        match found.filter(|(_, _, digits)| *digits > 0) {
            Some((_, name, digits)) => expected.push(format!(
                "padded/ {{\"id\":{id},\"name\":\"{name}\",\"digits\":{digits}}}"
            )),
            None => expected.push(format!(
                "padded/ {{\"id\":{id},\"name\":null,\"digits\":null}}"
            )),
        }
    }
    expected.sort();
    let mut got = committed_lines(&out);
    got.sort();
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
}

#[test]
fn a_lookup_table_is_read_again_once_its_cache_ttl_has_passed() {
    let tmp = tempfile::tempdir().unwrap();
    let orders = tmp.path().join("orders");
    std::fs::create_dir(&orders).unwrap();
    let dim = tmp.path().join("dim");
    std::fs::create_dir(&dim).unwrap();
    let write = |dir: &std::path::Path, name: &str, text: &str| {
        let hidden = dir.join(format!(".{name}"));
        std::fs::write(&hidden, text).unwrap();
        std::fs::rename(&hidden, dir.join(name)).unwrap();
    };
    write(&dim, "currencies.csv", "EUR,Euro,2\n");
    let out = tmp.path().join("out");
    let sql = render(
        "
CREATE TABLE orders (id BIGINT, currency STRING, pt AS PROCTIME())
WITH ('connector' = 'filesystem', 'path' = '${orders}', 'format' = 'csv',
      'source.monitor-interval' = '30 ms');
CREATE TABLE currencies (currency STRING, name STRING, digits INT)
WITH ('connector' = 'filesystem', 'path' = '${dim}', 'format' = 'csv',
      'lookup.join.cache.ttl' = '200 ms');
CREATE TABLE named (id BIGINT, name STRING)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO named
SELECT o.id, c.name FROM orders AS o
JOIN currencies FOR SYSTEM_TIME AS OF o.pt AS c ON o.currency = c.currency;
",
        &[
            ("orders", orders.to_str().unwrap()),
            ("dim", dim.to_str().unwrap()),
            ("out", out.to_str().unwrap()),
        ],
    );
    let script = write_script(tmp.path(), "ttl.sql", &sql);
    let chk = tmp.path().join("chk");
    let mut child = spawn(
        &[
            script.to_str().unwrap(),
            "-p",
            "1",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "50 ms",
        ],
        &[],
    );
    write(&orders, "a.csv", "1,EUR\n2,EUR\n");
    wait_for("the first orders", &mut child, || {
        committed_lines(&out).len() >= 2
    });
    write(&dim, "currencies.csv", "EUR,Euro (new),2\n");
    std::thread::sleep(std::time::Duration::from_millis(500));
    write(&orders, "b.csv", "3,EUR\n");
    wait_for("the later order", &mut child, || {
        committed_lines(&out).len() >= 3
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let mut got = committed_lines(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "{\"id\":1,\"name\":\"Euro\"}",
            "{\"id\":2,\"name\":\"Euro\"}",
            "{\"id\":3,\"name\":\"Euro (new)\"}",
        ]
    );
}
