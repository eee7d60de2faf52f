//! Builders shared by the integration tests: components made through the plugin's own
//! spec (as the host makes them), tasks, turns and episodes.

#![allow(dead_code)]

use drmas_plugin_api::{
    Action, Agent, ComponentFactory, ComponentKind, Environment, EpisodeRecord, EpisodeView,
    PluginError, Reward, Task, TurnRecord,
};

fn factory(kind: ComponentKind, name: &str) -> ComponentFactory {
    let spec = drmas_math::plugin();
    let index = spec
        .entries
        .iter()
        .position(|e| e.factory.kind() == kind && e.name == name)
        .unwrap_or_else(|| panic!("math has no {kind} {name}"));
    spec.entries.into_iter().nth(index).unwrap().factory
}

pub fn try_agent(name: &str, config: &str) -> Result<Box<dyn Agent>, PluginError> {
    match factory(ComponentKind::Agent, name) {
        ComponentFactory::Agent(make) => make(config),
        _ => unreachable!(),
    }
}

pub fn agent(name: &str, config: &str) -> Box<dyn Agent> {
    try_agent(name, config).expect("config accepted")
}

pub fn try_reward(name: &str, config: &str) -> Result<Box<dyn Reward>, PluginError> {
    match factory(ComponentKind::Reward, name) {
        ComponentFactory::Reward(make) => make(config),
        _ => unreachable!(),
    }
}

pub fn reward(name: &str) -> Box<dyn Reward> {
    try_reward(name, "").expect("config accepted")
}

pub fn try_environment(config: &str) -> Result<Box<dyn Environment>, PluginError> {
    match factory(ComponentKind::Environment, "env") {
        ComponentFactory::Environment(make) => make(config),
        _ => unreachable!(),
    }
}

pub fn task(question: &str, answer: &str) -> Task {
    Task {
        id: "t1".into(),
        source: "test".into(),
        question: question.into(),
        answer: answer.into(),
        meta: Default::default(),
    }
}

pub fn handoff(to: &str) -> Action {
    Action::Handoff { to: to.into() }
}

pub fn finish(answer: &str) -> Action {
    Action::Finish {
        answer: answer.into(),
    }
}

pub fn turn(turn: u32, agent: &str, completion: &str, action: Action) -> TurnRecord {
    TurnRecord {
        turn,
        agent: agent.into(),
        completion: completion.into(),
        action,
        valid: true,
        ..TurnRecord::default()
    }
}

pub fn view(task: Task, agent: &str, transcript: Vec<TurnRecord>) -> EpisodeView {
    EpisodeView {
        task,
        agent: agent.into(),
        turn: transcript.len() as u32,
        transcript,
        ..EpisodeView::default()
    }
}

pub fn episode(
    task: Task,
    final_answer: Option<&str>,
    transcript: Vec<TurnRecord>,
) -> EpisodeRecord {
    EpisodeRecord {
        task,
        final_answer: final_answer.map(Into::into),
        transcript,
        ..EpisodeRecord::default()
    }
}
