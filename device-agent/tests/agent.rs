//! The native agent in a real group on the real server: it joins by code, reports itself as a
//! native device with a measured speed, and answers relayed image and feature frames with the
//! answer the unsplit model gives; a bad frame gets a typed error and the agent goes on.

use std::sync::Arc;

use awc::ws::Message;
use device_agent::{Agent, AgentOptions};
use futures_util::SinkExt;
use serde_json::json;
use split_shared::codec::{EncodeContext, Setting};
use split_shared::model::{Boundary, Features};
use split_shared::protocol::{ErrorCode, LlmErrorCode, LlmFrame, MODEL_SMOLLM2, Reply, Request};
use split_shared::runtime::SplitModel;

mod common;

use common::{Socket, next_json, relay};

const CHELSEA: &[u8] = include_bytes!("../../web/samples/chelsea.png");
/// ImageNet's cat classes: tabby, tiger cat, Persian, Siamese, Egyptian cat.
const CATS: std::ops::RangeInclusive<u16> = 281..=285;

/// Relay `request` to `peer` and wait for its reply.
async fn ask(ws: &mut Socket, peer: u32, request: &[u8]) -> Reply {
    Reply::decode(&relay(ws, peer, request).await).unwrap()
}

fn top1(reply: &Reply) -> u16 {
    match reply {
        Reply::Result { top, .. } => top[0].class,
        other => panic!("expected a result, got {other:?}"),
    }
}

#[actix_web::test]
async fn the_agent_joins_and_answers_relayed_frames() {
    let config = cloud_server::Config::for_tests();
    let state = cloud_server::AppState::load(&config)
        .expect("weights missing: run `cargo xtask setup` (or set SPLIT_WEIGHTS)");
    let calibration_path = split_paths::calibration_file();
    let served = state.clone();
    let srv = actix_test::start(move || {
        actix_web::App::new().configure(cloud_server::config_app(served.clone()))
    });
    let (_, mut phone) = awc::Client::new().ws(srv.url("/group")).connect().await.unwrap();
    let device = json!({ "id": "phone", "name": "phone", "backend": "cpu", "msPerImage": 90.0 });
    phone
        .send(Message::Text(json!({ "type": "create", "device": device }).to_string().into()))
        .await
        .unwrap();
    let joined = next_json(&mut phone).await;
    let code = joined["code"].as_str().unwrap().to_string();

    let agent = Arc::new(
        Agent::load(&split_paths::weights_file(), Some(&calibration_path)).expect("weights"),
    );
    let options = AgentOptions {
        url: srv.url("/group").replace("http://", "ws://"),
        code: Some(code.to_lowercase()),
        id: "tv".into(),
        name: "living-room TV".into(),
        token: None,
        on_joined: None,
    };
    let running = actix_web::rt::spawn(device_agent::run(agent.clone(), options));

    // The agent appears as a native member with the speed it measured.
    let members = next_json(&mut phone).await;
    let tv = &members["members"][1];
    assert_eq!(
        (tv["id"].as_str(), tv["backend"].as_str()),
        (Some("tv"), Some("native")),
        "{members}"
    );
    assert!(tv["msPerImage"].as_f64().unwrap() > 0.0);
    let peer = tv["peer"].as_u64().unwrap() as u32;

    // A whole image: the full network on the agent.
    let reply =
        ask(&mut phone, peer, &Request::Image { id: 1, payload: CHELSEA.to_vec() }.to_bytes())
            .await;
    assert!(CATS.contains(&top1(&reply)), "{reply:?}");
    let Reply::Result { from, .. } = &reply else { unreachable!() };
    assert_eq!(*from, Boundary::INPUT.index());

    // Features at block5 in the default codec, as the phone's edge would send them: the agent
    // finishes the network and gives the answer the unsplit model gives.
    let img = split_shared::image::preprocess(CHELSEA).unwrap();
    let device = burn::tensor::Device::flex();
    let model =
        split_shared::EfficientNetLite0::load(&split_paths::weights_file(), &device).unwrap();
    let x = split_shared::image::to_input_tensor(&img, &device);
    let full = model.forward_range(x.clone(), Boundary::INPUT, Boundary::LOGITS).unwrap();
    let full: Vec<f32> = full.into_data().try_to_vec::<f32>().unwrap();
    let expected = split_shared::labels::top_k(&full, 1)[0].class;
    let split = "block5".parse::<Boundary>().unwrap();
    let features =
        Features::from_tensor(split, model.forward_range(x, Boundary::INPUT, split).unwrap())
            .unwrap();
    let calibration = split_shared::codec::Calibration::load(&calibration_path).unwrap();
    let setting: Setting = calibration.default_setting();
    let frame = features.to_frame(setting, EncodeContext::new(Some(&calibration))).unwrap();
    let reply = ask(&mut phone, peer, &Request::Features { id: 2, frame }.to_bytes()).await;
    assert_eq!(top1(&reply), expected);
    let Reply::Result { from, id, .. } = &reply else { unreachable!() };
    assert_eq!((*from, *id), (split.index(), 2));

    // A frame that is not a request: a typed error, and the agent still answers after it.
    let reply = ask(&mut phone, peer, b"SPLT garbage").await;
    assert!(matches!(reply, Reply::Error { code: ErrorCode::Malformed, .. }), "{reply:?}");
    let reply = ask(
        &mut phone,
        peer,
        &Request::Image { id: 3, payload: b"not an image".to_vec() }.to_bytes(),
    )
    .await;
    assert!(matches!(reply, Reply::Error { id: 3, code: ErrorCode::BadImage, .. }), "{reply:?}");
    let reply =
        ask(&mut phone, peer, &Request::Image { id: 4, payload: CHELSEA.to_vec() }.to_bytes())
            .await;
    assert!(CATS.contains(&top1(&reply)));

    // The model's input itself (a 224x224 JPEG, what a client that shrinks photos sends) runs
    // as it is, not cropped again: the top-5 is the server's to the last bit.
    let input = split_shared::image::encode_jpeg(&img, 90).unwrap();
    let hosted = split_shared::model::Lite0Split::new(model, device, None).unwrap();
    let x = hosted.image_input(&input, true).unwrap();
    let want = split_shared::labels::top_k(hosted.forward_range(x, 20).unwrap().values(), 5);
    let reply = ask(&mut phone, peer, &Request::Input { id: 5, payload: input }.to_bytes()).await;
    let Reply::Result { top, .. } = &reply else { panic!("{reply:?}") };
    assert_eq!(top, &want);
    // A frame for a model the agent does not run.
    let other = Request::Image { id: 6, payload: CHELSEA.to_vec() }.to_bytes_for(9);
    let reply = ask(&mut phone, peer, &other).await;
    assert!(
        matches!(reply, Reply::Error { id: 6, code: ErrorCode::UnknownModel, .. }),
        "{reply:?}"
    );
    // A split chat's open for an agent started without the language model: refused with the
    // `/llm` code, and the image answers go on.
    let open =
        LlmFrame::Open { id: 7, model: MODEL_SMOLLM2, first: 4, end: 30, positions: 8, head: None };
    let refused = LlmFrame::decode(&relay(&mut phone, peer, &open.encode()).await).unwrap();
    assert!(
        matches!(refused, LlmFrame::Error { id: 7, code: LlmErrorCode::UnknownModel, .. }),
        "{refused:?}"
    );
    let reply =
        ask(&mut phone, peer, &Request::Image { id: 8, payload: CHELSEA.to_vec() }.to_bytes())
            .await;
    assert!(CATS.contains(&top1(&reply)));
    running.abort();
}

#[actix_web::test]
async fn a_refused_join_is_an_error_with_the_servers_reason() {
    let config = cloud_server::Config::for_tests();
    let state = cloud_server::AppState::load(&config).expect("weights");
    let srv = actix_test::start(move || {
        actix_web::App::new().configure(cloud_server::config_app(state.clone()))
    });
    let agent = Arc::new(Agent::load(&split_paths::weights_file(), None).unwrap());
    let options = AgentOptions {
        url: srv.url("/group").replace("http://", "ws://"),
        code: Some("ZZZZZZ".into()),
        id: "tv".into(),
        name: "tv".into(),
        token: None,
        on_joined: None,
    };
    let err = device_agent::run(agent, options).await.unwrap_err().to_string();
    assert!(err.contains("unknown_group"), "{err}");
    let unreachable = AgentOptions {
        url: "ws://127.0.0.1:9/group".into(),
        code: None,
        id: "tv".into(),
        name: "tv".into(),
        token: None,
        on_joined: None,
    };
    let agent = Arc::new(Agent::load(&split_paths::weights_file(), None).unwrap());
    let err = device_agent::run(agent, unreachable).await.unwrap_err().to_string();
    assert!(err.contains("connecting to ws://127.0.0.1:9/group"), "{err}");
}
