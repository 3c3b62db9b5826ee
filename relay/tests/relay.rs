//! The impairment relay over real sockets on loopback: what it applies is measured from the
//! outside, by round trips to an echo server behind it (a Duet gateway behind it, and the
//! `loadtest relay` command: `loadtest/tests/relay.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use relay::bench::EchoServer;
use relay::{Blackout, LinkParams, Profile, Relay, RelayConfig};
use tokio::net::UdpSocket;

fn profile(params: LinkParams) -> Profile {
    Profile { name: "test".into(), description: String::new(), up: params.clone(), down: params }
}

async fn relay_to_echo(params: LinkParams) -> (Relay, EchoServer) {
    let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let relay = Relay::start(RelayConfig::new("127.0.0.1:0".parse().unwrap(), echo.local_addr(), profile(params))).await.unwrap();
    (relay, echo)
}

async fn client(target: SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.connect(target).await.unwrap();
    s
}

/// One round trip of `seq`; its time, or `None` if nothing came back within `timeout`.
async fn round_trip(s: &UdpSocket, seq: u64, timeout: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.send(&seq.to_le_bytes()).await.unwrap();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at((t + timeout).into(), s.recv(&mut buf)).await {
            Ok(Ok(8)) if buf[..8] == seq.to_le_bytes() => return Some(t.elapsed()),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_through_the_relay_takes_twice_the_one_way_delay() {
    let (relay, echo) = relay_to_echo(LinkParams { delay_ms: 40.0, ..LinkParams::default() }).await;
    let (direct, relayed) = (client(echo.local_addr()).await, client(relay.local_addr()).await);
    let mut rtts = Vec::new();
    for seq in 0..15 {
        assert!(round_trip(&direct, seq, Duration::from_secs(1)).await.unwrap() < Duration::from_millis(20));
        rtts.push(round_trip(&relayed, seq, Duration::from_secs(1)).await.expect("no loss configured").as_secs_f64() * 1e3);
    }
    rtts.sort_by(f64::total_cmp);
    // 2 x 40 ms, plus under 1 ms of timer granularity per direction and loopback.
    assert!(rtts[0] >= 80.0 && rtts[7] < 88.0 && rtts[14] < 150.0, "{rtts:?}");
    let stats = relay.stats();
    assert_eq!((stats.up.packets_out, stats.down.packets_out, stats.clients), (15, 15, 1));
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_through_the_relay_is_the_configured_rate_each_way() {
    let (relay, _echo) = relay_to_echo(LinkParams { loss: 0.2, ..LinkParams::default() }).await;
    let s = std::sync::Arc::new(client(relay.local_addr()).await);
    // Read while sending: a socket buffer holds only a few hundred small datagrams.
    let reader = s.clone();
    let counter = tokio::spawn(async move {
        let (mut back, mut buf) = (0u64, [0u8; 64]);
        while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(300), reader.recv(&mut buf)).await {
            back += 1;
        }
        back
    });
    let n = 2000u64;
    for seq in 0..n {
        s.send(&seq.to_le_bytes()).await.unwrap();
        if seq % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let back = counter.await.unwrap();
    let stats = relay.stats();
    // Each way 20 %: 64 % of round trips survive (standard deviation about 1 %).
    let share = back as f64 / n as f64;
    assert!((share - 0.64).abs() < 0.05, "{share}");
    let up_loss = stats.up.dropped.loss as f64 / stats.up.packets_in as f64;
    assert!((up_loss - 0.2).abs() < 0.03, "{up_loss}");
    assert_eq!(stats.up.packets_in, n);
    assert_eq!(stats.up.packets_out + stats.up.dropped.total(), n);
    assert_eq!(stats.down.packets_out, back);
    assert_eq!(stats.up.dropped.overflow + stats.down.dropped.overflow, 0);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackout_drops_everything_in_its_window_then_traffic_resumes() {
    let (relay, _echo) = relay_to_echo(LinkParams { blackout: Some(Blackout { every_s: 10.0, for_s: 0.4, offset_s: Some(0.3) }), ..LinkParams::default() }).await;
    let t0 = relay.epoch();
    let s = std::sync::Arc::new(client(relay.local_addr()).await);
    let reader = s.clone();
    let echoed = tokio::spawn(async move {
        let (mut seqs, mut buf) = (std::collections::HashSet::new(), [0u8; 64]);
        // Longer than the blackout: silence during it is expected.
        while let Ok(Ok(8)) = tokio::time::timeout(Duration::from_millis(700), reader.recv(&mut buf)).await {
            seqs.insert(u64::from_le_bytes(buf[..8].try_into().unwrap()));
        }
        seqs
    });
    // One datagram every 5 ms for a second; the echo says which got through both ways.
    let mut sent = Vec::new();
    while t0.elapsed() < Duration::from_secs(1) {
        sent.push(t0.elapsed().as_secs_f64());
        s.send(&(sent.len() as u64 - 1).to_le_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let echoed = echoed.await.unwrap();
    let fates: Vec<(f64, bool)> = sent.iter().enumerate().map(|(i, &t)| (t, echoed.contains(&(i as u64)))).collect();
    // The window is [0.3, 0.7) s after the relay started.
    let inside: Vec<_> = fates.iter().filter(|(t, _)| (0.33..0.67).contains(t)).collect();
    let before: Vec<_> = fates.iter().filter(|(t, _)| *t < 0.27).collect();
    let after: Vec<_> = fates.iter().filter(|(t, _)| *t > 0.73).collect();
    assert!(inside.len() > 20 && inside.iter().all(|(_, ok)| !ok), "{fates:?}");
    assert!(before.len() > 20 && after.len() > 20, "{fates:?}");
    assert!(before.iter().chain(&after).all(|(_, ok)| *ok), "{fates:?}");
    let stats = relay.stats();
    assert!(stats.up.dropped.blackout >= inside.len() as u64);
    assert_eq!(stats.up.dropped.total(), stats.up.dropped.blackout);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_table_is_bounded_and_forgets_idle_clients() {
    let echo = EchoServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let config = RelayConfig { max_clients: 2, idle_timeout: Duration::from_millis(300), ..RelayConfig::new("127.0.0.1:0".parse().unwrap(), echo.local_addr(), Profile::clean("lan")) };
    let relay = Relay::start(config).await.unwrap();
    let (a, b, c) = (client(relay.local_addr()).await, client(relay.local_addr()).await, client(relay.local_addr()).await);
    let wait = Duration::from_millis(200);
    assert!(round_trip(&a, 1, wait).await.is_some());
    assert!(round_trip(&b, 1, wait).await.is_some());
    assert!(round_trip(&c, 1, wait).await.is_none(), "a third client is over the bound");
    let stats = relay.stats();
    assert_eq!((stats.clients, stats.clients_refused, stats.up.dropped.overflow), (2, 1, 1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stats = relay.stats();
    assert_eq!((stats.clients, stats.clients_expired), (0, 2));
    assert!(round_trip(&c, 2, wait).await.is_some(), "room again after the idle timeout");
    assert_eq!(relay.stats().clients_total, 3);
    relay.shutdown().await;
}
