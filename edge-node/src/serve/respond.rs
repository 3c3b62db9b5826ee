//! The shapes of OpenAI's answers: a whole body (one choice or several, with logprobs when
//! asked) or server-sent chunks, each with Duet's figures.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{DuetUsage, Usage};
use super::worker::{Event, Mode};
use edge_node::decode::{DecodeStats, TokenSource};

/// Which endpoint a response is shaped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `chat.completion`.
    Chat,
    /// `text_completion`.
    Text,
}

/// What every body or chunk of one response repeats.
pub struct Head {
    /// `chatcmpl-N` or `cmpl-N`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// The endpoint.
    pub kind: Kind,
    /// Prompt tokens, all prompts together.
    pub prompt_tokens: usize,
    /// How the request was routed.
    pub mode: Mode,
    /// Its threshold (0 local, 1 cloud).
    pub tau: f32,
    /// `stream_options.include_usage`: usage in a last chunk of its own.
    pub include_usage: bool,
}

/// One finished choice of a whole body.
pub struct Choice {
    /// Its text (with `echo`, the prompt's first).
    pub text: String,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Its figures.
    pub stats: Box<DecodeStats>,
    /// `choices[].logprobs`, already shaped for the endpoint, or null.
    pub logprobs: Value,
}

impl Head {
    /// `duet` figures of one generation.
    pub fn duet(&self, stats: &DecodeStats) -> DuetUsage {
        DuetUsage { mode: self.mode, tau: self.tau, rate_control: stats.rate_control.map(|c| c.report()), routing: stats.routing, tokens_per_s: stats.tokens_per_s }
    }

    fn usage(&self, completion_tokens: usize) -> Usage {
        Usage { prompt_tokens: self.prompt_tokens, completion_tokens, total_tokens: self.prompt_tokens + completion_tokens }
    }

    /// The non-streamed body; with several choices each carries its own `duet` figures and the
    /// top-level `duet` is the first's.
    pub fn whole(&self, choices: &[Choice]) -> Value {
        let several = choices.len() > 1;
        let list: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let mut v = match self.kind {
                    Kind::Chat => json!({"index": index, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason, "logprobs": c.logprobs}),
                    Kind::Text => json!({"index": index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": c.logprobs}),
                };
                if several {
                    v["duet"] = json!(self.duet(&c.stats));
                }
                v
            })
            .collect();
        let usage = self.usage(choices.iter().map(|c| c.stats.tokens).sum());
        let duet = choices.first().map(|c| json!(self.duet(&c.stats))).unwrap_or(Value::Null);
        let object = if self.kind == Kind::Chat { "chat.completion" } else { "text_completion" };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": list, "usage": usage, "duet": duet})
    }

    /// One streamed chunk: a text piece with its source, or the end with `finish_reason` (and,
    /// unless usage comes in a chunk of its own, `usage`).
    fn chunk(&self, text: Option<&str>, source: Option<TokenSource>, finish: Option<(&str, &DecodeStats)>) -> Value {
        let finish_reason = finish.map(|(f, _)| f);
        let choice = match self.kind {
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                    None => json!({}),
                };
                json!({"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null})
            }
            Kind::Text => json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": finish_reason, "logprobs": null}),
        };
        let mut v = self.envelope(vec![choice]);
        if let Some(source) = source {
            v["duet"] = json!({"source": source});
        }
        if let Some((_, stats)) = finish {
            v["duet"] = json!(self.duet(stats));
            if !self.include_usage {
                v["usage"] = json!(self.usage(stats.tokens));
            }
        }
        v
    }

    /// `stream_options.include_usage`'s last chunk: no choices, the usage.
    fn usage_chunk(&self, stats: &DecodeStats) -> Value {
        let mut v = self.envelope(vec![]);
        v["usage"] = json!(self.usage(stats.tokens));
        v["duet"] = json!(self.duet(stats));
        v
    }

    fn envelope(&self, choices: Vec<Value>) -> Value {
        let object = if self.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }
}

/// The events of a job as server-sent events; dropping the stream (the client left) closes the
/// job's channel, which stops its generation.
pub fn stream(head: Head, rx: mpsc::UnboundedReceiver<Event>) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    enum Phase {
        Start,
        Running,
        Usage(Box<DecodeStats>),
        Over,
    }
    let state = (head, rx, Phase::Start);
    let events = futures_util::stream::unfold(state, |(head, mut rx, phase)| async move {
        let data = match phase {
            Phase::Over => return None,
            Phase::Usage(stats) => return Some((Ok(SseEvent::default().data(head.usage_chunk(&stats).to_string())), (head, rx, Phase::Over))),
            Phase::Start if head.kind == Kind::Chat => return Some((Ok(SseEvent::default().data(head.chunk(None, None, None).to_string())), (head, rx, Phase::Running))),
            _ => match rx.recv().await {
                Some(Event::Text { text, source }) => head.chunk(Some(&text), Some(source), None).to_string(),
                Some(Event::Done { finish_reason, stats, .. }) => {
                    let last = head.chunk(None, None, Some((finish_reason, &stats))).to_string();
                    let next = if head.include_usage { Phase::Usage(stats) } else { Phase::Over };
                    return Some((Ok(SseEvent::default().data(last)), (head, rx, next)));
                }
                Some(Event::Failed(e)) => json!({"error": {"message": e, "type": "server_error"}}).to_string(),
                None => return None,
            },
        };
        Some((Ok(SseEvent::default().data(data)), (head, rx, Phase::Running)))
    });
    let done = futures_util::stream::once(async { Ok(SseEvent::default().data("[DONE]")) });
    Sse::new(futures_util::StreamExt::chain(events, done))
}
