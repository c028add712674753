//! DeliveryService (issue 52): every RPC refuses bad input naming the
//! field, an unknown ledger or consumer is NOT_FOUND naming it, a taken id
//! ALREADY_EXISTS, and the database is exactly as it was before each
//! refused call.

use super::BAD_LEDGER_NAMES;
use crate::harness::*;
use tally_proto::v1 as pb;
use tally_proto::v1::delivery_service_client::DeliveryServiceClient;
use tonic::transport::Channel;

const CONSUMER: &str = "ledgers/a/consumers/sink";

async fn deliveries(env: &Env) -> DeliveryServiceClient<Channel> {
    DeliveryServiceClient::connect(format!("http://{}", env.grpc_addr()))
        .await
        .expect("the client connects")
}

/// A ledger `a` with 3 finished rows and a consumer `sink` that was handed
/// one of them; answers that one's position.
async fn setup(env: &Env) -> i64 {
    env.ledger("a").await;
    env.enroll_n("a", "k", 3).await;
    let grant = env.claim("a", 3).await.expect("rows to claim");
    let outcomes = grant.keys().iter().map(|k| success(k, 1, 1)).collect();
    env.report(&grant.claim.name, outcomes).await;
    let mut d = deliveries(env).await;
    d.create_consumer(pb::CreateConsumerRequest {
        parent: ledger_name("a"),
        consumer_id: "sink".into(),
        consumer: None,
        start: None,
    })
    .await
    .unwrap();
    d.receive_results(pb::ReceiveResultsRequest {
        consumer: CONSUMER.into(),
        max_rows: 1,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .results[0]
        .position
}

fn consumer_with(c: pb::Consumer) -> pb::CreateConsumerRequest {
    pb::CreateConsumerRequest {
        parent: ledger_name("a"),
        consumer_id: "other".into(),
        consumer: Some(c),
        start: None,
    }
}

#[tokio::test]
async fn create_consumer() {
    let env = env().await;
    setup(&env).await;
    let d = deliveries(&env).await;
    for bad in BAD_LEDGER_NAMES {
        let s = env
            .rejected(d.clone().create_consumer(pb::CreateConsumerRequest {
                parent: bad.into(),
                consumer_id: "x".into(),
                ..Default::default()
            }))
            .await;
        assert_invalid(&s, &["parent"]);
    }
    for bad in ["", "Sink", "9sink", "sink-", "a_b", &"s".repeat(64)] {
        let s = env
            .rejected(d.clone().create_consumer(pb::CreateConsumerRequest {
                parent: ledger_name("a"),
                consumer_id: bad.into(),
                ..Default::default()
            }))
            .await;
        assert_invalid(&s, &["consumer_id"]);
    }
    let bad: [(pb::Consumer, &str); 7] = [
        (
            pb::Consumer {
                visibility_timeout: Some(secs(0)),
                ..Default::default()
            },
            "consumer.visibility_timeout",
        ),
        (
            pb::Consumer {
                visibility_timeout: Some(secs(13 * 3600)),
                ..Default::default()
            },
            "consumer.visibility_timeout",
        ),
        (
            pb::Consumer {
                max_deliveries: 1001,
                ..Default::default()
            },
            "consumer.max_deliveries",
        ),
        (
            pb::Consumer {
                max_deliveries: -1,
                ..Default::default()
            },
            "consumer.max_deliveries",
        ),
        (
            pb::Consumer {
                webhook: Some(pb::WebhookTarget {
                    url: "http://169.254.169.254/latest/meta-data/".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            "consumer.webhook.url",
        ),
        (
            pb::Consumer {
                webhook: Some(pb::WebhookTarget {
                    url: "ftp://hooks.example.com/".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            "consumer.webhook.url",
        ),
        (
            pb::Consumer {
                webhook: Some(pb::WebhookTarget {
                    url: "https://hooks.example.com/".into(),
                    secret: "not-a-secret".into(),
                    max_batch_rows: 0,
                }),
                ..Default::default()
            },
            "consumer.webhook.secret",
        ),
    ];
    for (c, field) in bad {
        let s = env
            .rejected(d.clone().create_consumer(consumer_with(c)))
            .await;
        assert_invalid(&s, &[field]);
    }
    let s = env
        .rejected(d.clone().create_consumer(pb::CreateConsumerRequest {
            start: Some(pb::ConsumerStart {
                at: Some(pb::consumer_start::At::AfterPosition(-5)),
            }),
            ..consumer_with(pb::Consumer::default())
        }))
        .await;
    assert_invalid(&s, &["start.after_position"]);
    let s = env
        .rejected(d.clone().create_consumer(pb::CreateConsumerRequest {
            parent: ledger_name("unknown"),
            ..consumer_with(pb::Consumer::default())
        }))
        .await;
    assert_not_found(&s, "ledger", "ledgers/unknown");
    let s = env
        .rejected(d.clone().create_consumer(pb::CreateConsumerRequest {
            consumer_id: "sink".into(),
            ..consumer_with(pb::Consumer::default())
        }))
        .await;
    assert_already_exists(&s, "consumer", CONSUMER);
    env.stop().await;
}

#[tokio::test]
async fn receive_ack_and_nack() {
    let env = env().await;
    let handed = setup(&env).await;
    let d = deliveries(&env).await;
    let receive = |r: pb::ReceiveResultsRequest| {
        let mut d = d.clone();
        async move { d.receive_results(r).await }
    };
    let ok = || pb::ReceiveResultsRequest {
        consumer: CONSUMER.into(),
        ..Default::default()
    };
    for bad in [
        "",
        "ledgers/a",
        "ledgers/a/consumers/",
        "ledgers/-/consumers/sink",
    ] {
        let s = env
            .rejected(receive(pb::ReceiveResultsRequest {
                consumer: bad.into(),
                ..ok()
            }))
            .await;
        assert_invalid(&s, &["consumer"]);
    }
    for (req, field) in [
        (
            pb::ReceiveResultsRequest {
                max_rows: 1001,
                ..ok()
            },
            "max_rows",
        ),
        (
            pb::ReceiveResultsRequest {
                max_rows: -1,
                ..ok()
            },
            "max_rows",
        ),
        (
            pb::ReceiveResultsRequest {
                wait: Some(secs(21)),
                ..ok()
            },
            "wait",
        ),
        (
            pb::ReceiveResultsRequest {
                wait: Some(secs(-1)),
                ..ok()
            },
            "wait",
        ),
        (
            pb::ReceiveResultsRequest {
                visibility_timeout: Some(secs(0)),
                ..ok()
            },
            "visibility_timeout",
        ),
    ] {
        let s = env.rejected(receive(req)).await;
        assert_invalid(&s, &[field]);
    }
    let s = env
        .rejected(receive(pb::ReceiveResultsRequest {
            consumer: "ledgers/a/consumers/nobody".into(),
            ..ok()
        }))
        .await;
    assert_not_found(&s, "consumer", "ledgers/a/consumers/nobody");

    let ack = |positions: Vec<i64>, up_to: i64| {
        let mut d = d.clone();
        async move {
            d.ack_results(pb::AckResultsRequest {
                consumer: CONSUMER.into(),
                positions,
                up_to_position: up_to,
            })
            .await
        }
    };
    let s = env.rejected(ack(vec![], 0)).await;
    assert_invalid(&s, &["positions"]);
    let s = env.rejected(ack(vec![handed, 0, -1], 0)).await;
    assert_invalid(&s, &["positions[1]", "positions[2]"]);
    let s = env.rejected(ack(vec![handed; 10_001], 0)).await;
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{}", s.message());
    // After the cursor: never handed out, and the handed one is not acked
    // either (nothing is written).
    let s = env.rejected(ack(vec![handed, handed + (1 << 20)], 0)).await;
    assert_invalid(&s, &["positions[1]"]);
    let s = env.rejected(ack(vec![], handed + (1 << 20))).await;
    assert_invalid(&s, &["up_to_position"]);

    let nack = |req: pb::NackResultsRequest| {
        let mut d = d.clone();
        async move { d.nack_results(req).await }
    };
    let base = || pb::NackResultsRequest {
        consumer: CONSUMER.into(),
        positions: vec![handed],
        ..Default::default()
    };
    for (req, field) in [
        (
            pb::NackResultsRequest {
                positions: vec![],
                ..base()
            },
            "positions",
        ),
        (
            pb::NackResultsRequest {
                retry_after: Some(secs(13 * 3600)),
                ..base()
            },
            "retry_after",
        ),
        (
            pb::NackResultsRequest {
                reason: "r".repeat(1025),
                dead_letter: true,
                ..base()
            },
            "reason",
        ),
    ] {
        let s = env.rejected(nack(req)).await;
        assert_invalid(&s, &[field]);
    }
    env.stop().await;
}

#[tokio::test]
async fn lists_reset_and_delete() {
    let env = env().await;
    setup(&env).await;
    let mut d = deliveries(&env).await;
    let s = env
        .rejected(d.list_consumers(pb::ListConsumersRequest {
            parent: ledger_name("a"),
            page_size: 1001,
            page_token: String::new(),
        }))
        .await;
    assert_invalid(&s, &["page_size"]);
    let s = env
        .rejected(d.list_dead_letters(pb::ListDeadLettersRequest {
            parent: CONSUMER.into(),
            page_size: 10,
            page_token: "not-a-token".into(),
        }))
        .await;
    assert_invalid(&s, &["page_token"]);
    let s = env
        .rejected(d.reset_consumer(pb::ResetConsumerRequest {
            name: CONSUMER.into(),
            to: None,
        }))
        .await;
    assert_invalid(&s, &["to"]);
    let s = env
        .rejected(d.reset_consumer(pb::ResetConsumerRequest {
            name: CONSUMER.into(),
            to: Some(pb::ConsumerStart {
                at: Some(pb::consumer_start::At::AfterPosition(-1)),
            }),
        }))
        .await;
    assert_invalid(&s, &["to.after_position"]);
    let s = env
        .rejected(d.delete_consumer(pb::DeleteConsumerRequest {
            name: "ledgers/a/consumers/nobody".into(),
        }))
        .await;
    assert_not_found(&s, "consumer", "ledgers/a/consumers/nobody");
    env.stop().await;
}
