//! The byte-level BPE tokenizer in the GGUF file (`tokenizer.ggml.model = "gpt2"`, pre-tokenizer
//! `smollm`), and the ChatML chat format its template describes.
//!
//! Encoding, as the model was trained:
//! 1. the control tokens (`<|im_start|>`, `<|im_end|>`, …) are cut out of the text where it
//!    may hold them (the chat format's own markup; never a user's message, see [`ChatTemplate`]);
//! 2. every digit becomes a piece of its own;
//! 3. the rest is cut as GPT-2 cuts it: `'s 't 're 've 'm 'll 'd`, runs of letters, of digits,
//!    of other symbols (each optionally led by one space), and whitespace, of which a run
//!    followed by text gives its last character to the next piece;
//! 4. each piece's UTF-8 bytes, spelled with GPT-2's printable stand-in characters, are merged
//!    pairwise in the order of the file's merge list, and the pieces looked up.
//!
//! Letters are Rust's `char::is_alphabetic` (Unicode `Alphabetic`, which also counts a few
//! combining marks that the trained regex's `\p{L}` does not); digits `char::is_numeric`
//! (`\p{N}`), whitespace `char::is_whitespace`.

use std::collections::HashMap;

use super::LlmError;
use crate::container::{Gguf, GgufValue};
use crate::runtime::SequenceError;

/// GGUF's token type of control tokens.
const CONTROL: i32 = 3;

/// Text ⇄ token ids.
#[derive(Debug)]
pub struct Tokenizer {
    /// Each id's string, in GPT-2's byte spelling.
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    /// A mergeable pair → (its rank, the merged token).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Control tokens, longest first (so a longer one wins where one is a prefix of another).
    controls: Vec<(String, u32)>,
    /// Byte → its stand-in character's token id. SmolLM2's vocabulary has none for 21 bytes
    /// (six control characters, and bytes that never occur in UTF-8 or only in characters
    /// of unassigned planes); those are dropped from the text, as Hugging Face's tokenizer
    /// (no byte fallback, no unknown token) drops them.
    byte_ids: [Option<u32>; 256],
    /// Stand-in character → byte.
    char_bytes: HashMap<char, u8>,
    /// Beginning and end of sequence.
    pub bos: u32,
    /// The token that ends an answer.
    pub eos: u32,
}

/// GPT-2's printable stand-in for each byte: printable Latin-1 stands for itself, the other 68
/// bytes for U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for (b, c) in out.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        *c = if printable {
            char::from(b as u8)
        } else {
            next += 1;
            char::from_u32(next - 1).expect("U+0100..U+0143 are chars")
        };
    }
    out
}

impl Tokenizer {
    /// The tokenizer in a GGUF file's metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Self, LlmError> {
        let strings = |key: &str| -> Result<Vec<String>, LlmError> {
            match g.get(key) {
                Some(GgufValue::Array(items)) => items
                    .iter()
                    .map(|v| match v {
                        GgufValue::Str(s) => Ok(s.clone()),
                        _ => Err(meta(key, "an element is not a string")),
                    })
                    .collect(),
                Some(_) => Err(meta(key, "not an array")),
                None => Err(LlmError::Missing(key.into())),
            }
        };
        match g.get("tokenizer.ggml.model") {
            Some(GgufValue::Str(m)) if m == "gpt2" => {}
            Some(other) => {
                return Err(meta(
                    "tokenizer.ggml.model",
                    &format!("{other:?}; only \"gpt2\" (byte-level BPE) is supported"),
                ));
            }
            None => return Err(LlmError::Missing("tokenizer.ggml.model".into())),
        }
        let tokens = strings("tokenizer.ggml.tokens")?;
        let types: Vec<i32> = match g.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(items)) => items
                .iter()
                .map(|v| match v {
                    GgufValue::I32(t) => Ok(*t),
                    _ => Err(meta("tokenizer.ggml.token_type", "an element is not an i32")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(LlmError::Missing("tokenizer.ggml.token_type".into())),
        };
        if types.len() != tokens.len() {
            return Err(meta("tokenizer.ggml.token_type", "not one type per token"));
        }
        let id = |key: &str| -> Result<u32, LlmError> {
            let v = g
                .get(key)
                .and_then(GgufValue::as_u64)
                .ok_or_else(|| LlmError::Missing(key.into()))?;
            if v as usize >= tokens.len() {
                return Err(meta(key, "outside the vocabulary"));
            }
            Ok(v as u32)
        };
        let (bos, eos) = (id("tokenizer.ggml.bos_token_id")?, id("tokenizer.ggml.eos_token_id")?);
        let ids: HashMap<String, u32> =
            tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut merges = HashMap::new();
        for (rank, m) in strings("tokenizer.ggml.merges")?.iter().enumerate() {
            let bad = || {
                meta(
                    "tokenizer.ggml.merges",
                    &format!("merge {rank} ({m:?}) is not two tokens whose join is a token"),
                )
            };
            let (a, b) = m.split_once(' ').ok_or_else(bad)?;
            let (&ia, &ib) = ids.get(a).zip(ids.get(b)).ok_or_else(bad)?;
            let &joined = ids.get(&format!("{a}{b}")).ok_or_else(bad)?;
            merges.entry((ia, ib)).or_insert((rank as u32, joined));
        }
        let chars = byte_chars();
        let mut byte_ids = [None; 256];
        for (b, c) in chars.iter().enumerate() {
            byte_ids[b] = ids.get(&c.to_string()).copied();
        }
        let mut controls: Vec<(String, u32)> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, t))| **t == CONTROL)
            .map(|(i, (s, _))| (s.clone(), i as u32))
            .collect();
        controls.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        let char_bytes = chars.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        Ok(Tokenizer { tokens, ids, merges, controls, byte_ids, char_bytes, bos, eos })
    }

    /// Tokens in the vocabulary.
    pub fn vocab(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token's exact string (a control token's name, for example).
    pub fn id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// Text with control tokens recognised where their names appear.
    pub fn encode_with_controls(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest control token; the longest of those starting there.
            let hit = self
                .controls
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            match hit {
                Some((at, len, id)) => {
                    self.encode_into(&rest[..at], &mut out);
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => {
                    self.encode_into(rest, &mut out);
                    break;
                }
            }
        }
        out
    }

    /// Plain text: control tokens' names are spelled out like any other text.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        self.encode_into(text, &mut out);
        out
    }

    fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        for piece in pieces(text) {
            self.bpe(piece, out);
        }
    }

    /// One piece's tokens: its bytes' stand-ins merged by rank.
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<u32> =
            piece.bytes().filter_map(|b| self.byte_ids[usize::from(b)]).collect();
        loop {
            let best = symbols
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| {
                    self.merges.get(&(w[0], w[1])).map(|&(rank, joined)| (rank, i, joined))
                })
                .min();
            let Some((rank, _, _)) = best else { break };
            // Every occurrence of the best pair, left to right.
            let mut merged = Vec::with_capacity(symbols.len());
            let mut i = 0;
            while i < symbols.len() {
                if i + 1 < symbols.len()
                    && let Some(&(r, joined)) = self.merges.get(&(symbols[i], symbols[i + 1]))
                    && r == rank
                {
                    merged.push(joined);
                    i += 2;
                    continue;
                }
                merged.push(symbols[i]);
                i += 1;
            }
            symbols = merged;
        }
        out.extend(symbols);
    }

    /// The bytes of a token sequence (which may end inside a UTF-8 character: see
    /// [`Tokenizer::decode`] for text).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, LlmError> {
        let mut out = Vec::new();
        for &id in ids {
            let token = self
                .tokens
                .get(id as usize)
                .ok_or(SequenceError::Token { id, vocab: self.vocab() })?;
            for c in token.chars() {
                match self.char_bytes.get(&c) {
                    Some(&b) => out.push(b),
                    // Not a byte stand-in (control tokens' names may hold any character).
                    None => out.extend_from_slice(c.to_string().as_bytes()),
                }
            }
        }
        Ok(out)
    }

    /// The text of a token sequence; bytes that are not UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlmError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}

/// The pre-tokenizer: digits one by one, then GPT-2's pieces.
pub(crate) fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_numeric() {
            gpt2_pieces(&text[start..i], &mut out);
            out.push(&text[i..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    gpt2_pieces(&text[start..], &mut out);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Number
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// GPT-2's pieces: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
fn gpt2_pieces<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let at = |i: usize| chars.get(i).map_or(s.len(), |&(b, _)| b);
    let n = chars.len();
    let mut i = 0;
    while i < n {
        let c = chars[i].1;
        if c == '\'' {
            let rest = &s[at(i + 1)..];
            if let Some(len) = ["s", "t", "re", "ve", "m", "ll", "d"]
                .iter()
                .find(|x| rest.starts_with(**x))
                .map(|x| x.len())
            {
                out.push(&s[at(i)..at(i + 1) + len]);
                i += 1 + len; // the suffixes are ASCII: one char per byte
                continue;
            }
        }
        // One leading space joins a run of letters, digits or other symbols.
        let j =
            if c == ' ' && i + 1 < n && class(chars[i + 1].1) != Class::Space { i + 1 } else { i };
        let k = class(chars[j].1);
        let mut end = j + 1;
        if k == Class::Space {
            while end < n && class(chars[end].1) == Class::Space {
                end += 1;
            }
            // Followed by text, a run of two or more leaves its last character to what follows.
            if end < n && end - i >= 2 {
                end -= 1;
            }
        } else {
            while end < n && class(chars[end].1) == k {
                end += 1;
            }
        }
        out.push(&s[at(i)..at(end)]);
        i = end;
    }
}

/// The ChatML format (`<|im_start|>role\ncontent<|im_end|>\n`) the file's
/// `tokenizer.chat_template` describes, with the system message it adds when a conversation
/// has none.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatTemplate {
    /// The system message used when the conversation starts without one.
    pub default_system: Option<String>,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What was said.
    pub content: String,
}

impl ChatTemplate {
    /// Recognise the template: ChatML markup, and the default system message in its first
    /// `'<|im_start|>system\n…<|im_end|>` literal. Other template languages are refused
    /// rather than guessed at (this is not a Jinja interpreter).
    pub fn from_gguf(g: &Gguf) -> Result<Self, LlmError> {
        const KEY: &str = "tokenizer.chat_template";
        let Some(GgufValue::Str(t)) = g.get(KEY) else {
            return Err(LlmError::Missing(KEY.into()));
        };
        if !(t.contains("<|im_start|>")
            && t.contains("<|im_end|>")
            && t.contains("add_generation_prompt"))
        {
            return Err(meta(KEY, "not a ChatML template (<|im_start|>role … <|im_end|>)"));
        }
        const OPEN: &str = "'<|im_start|>system\n";
        let default_system = t.find(OPEN).and_then(|at| {
            let rest = &t[at + OPEN.len()..];
            rest.find("<|im_end|>").map(|end| rest[..end].to_string())
        });
        Ok(ChatTemplate { default_system })
    }

    /// The tokens of a conversation and the opening of the assistant's answer. Messages'
    /// contents are plain text: a control token's name typed by a user is spelled out, not
    /// obeyed.
    pub fn encode(&self, tok: &Tokenizer, messages: &[Message]) -> Result<Vec<u32>, LlmError> {
        let start =
            tok.id("<|im_start|>").ok_or_else(|| LlmError::Missing("<|im_start|> token".into()))?;
        let end =
            tok.id("<|im_end|>").ok_or_else(|| LlmError::Missing("<|im_end|> token".into()))?;
        let mut out = Vec::new();
        let turn = |role: &str, content: &str, out: &mut Vec<u32>| {
            out.push(start);
            out.extend(tok.encode(&format!("{role}\n{content}")));
            out.push(end);
            out.extend(tok.encode("\n"));
        };
        if messages.first().is_none_or(|m| m.role != "system")
            && let Some(system) = &self.default_system
        {
            turn("system", system, &mut out);
        }
        for m in messages {
            turn(&m.role, &m.content, &mut out);
        }
        out.push(start);
        out.extend(tok.encode("assistant\n"));
        Ok(out)
    }
}

fn meta(key: &str, why: &str) -> LlmError {
    LlmError::Metadata { key: key.into(), why: why.into() }
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_follow_gpt2_and_single_digits() {
        assert_eq!(
            pieces("Hello, world! 12345 don't  stop\n\ttabs"),
            [
                "Hello", ",", " world", "!", " ", "1", "2", "3", "4", "5", " don", "'t", " ",
                " stop", "\n", "\t", "tabs"
            ]
        );
        // `\s+(?!\S)` leaves the run's last character; alone before text it is `\s+`.
        assert_eq!(pieces(" \nx"), [" ", "\n", "x"]);
        assert_eq!(pieces("a   "), ["a", "   "]);
        assert_eq!(pieces("''s ?!x"), ["''", "s", " ?!", "x"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }
}
