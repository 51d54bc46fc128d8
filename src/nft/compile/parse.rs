//! The commands of a rendered script, as nftables' grammar has them, for the forms the
//! templates write: tables (whole blocks, with a comment and `flags owner`, and
//! `add`/`delete`/`flush`), chains with their hooks, sets and maps with their types, rules,
//! and deletions by name or handle. Rules stay token lists here; `rule` compiles them.
//! Elements are not among them: they reach the kernel from the desired state itself
//! (`wire`), never through text.

use super::CompileError;
use super::lex::Token;
use crate::model::Family;
use crate::netlink::abi::NFT_TABLE_F_OWNER;

/// A table: family and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    /// `ip` or `ip6`.
    pub family: Family,
    /// The table's name.
    pub table: String,
}

/// A set or map as declared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetDecl {
    /// Its name.
    pub name: String,
    /// Declared with `map`.
    pub map: bool,
    /// `type a . b`: data type names; `typeof`: expressions (token lists), one per field.
    pub key: Vec<Vec<Token>>,
    /// The data after `:`, likewise (`verdict` for a verdict map).
    pub data: Vec<Vec<Token>>,
    /// Declared with `typeof` rather than `type`.
    pub typeof_: bool,
    /// `flags` words.
    pub flags: Vec<String>,
    /// `timeout` in seconds.
    pub timeout: Option<u64>,
    /// `size`: the most elements it may hold (the kernel sizes its hash table for them).
    pub size: Option<u32>,
    /// `comment`.
    pub comment: Option<String>,
    /// The line of its declaration.
    pub line: usize,
}

/// A base chain's hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// `filter` or `nat`.
    pub kind: String,
    /// `prerouting`, `input`, `output`, `postrouting`.
    pub hook: String,
    /// Its priority.
    pub priority: i32,
}

/// A chain as declared in a table block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecl {
    /// Its name.
    pub name: String,
    /// For a base chain.
    pub hook: Option<Hook>,
    /// Its rules, each a token list with its line.
    pub rules: Vec<(usize, Vec<Token>)>,
    /// The line of its declaration.
    pub line: usize,
}

/// One command of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `add table`.
    AddTable(Obj),
    /// `delete table`.
    DeleteTable(Obj),
    /// `flush table`: every rule of the table goes.
    FlushTable(Obj),
    /// `table … { … }`.
    Table {
        /// The table.
        obj: Obj,
        /// Its comment.
        comment: Option<String>,
        /// Its flags (`NFT_TABLE_F_*`): `flags owner` ties it to the socket that sends it.
        flags: u32,
        /// Its sets, in order.
        sets: Vec<SetDecl>,
        /// Its chains, in order.
        chains: Vec<ChainDecl>,
    },
    /// `add chain`.
    AddChain(Obj, String),
    /// `flush chain`.
    FlushChain(Obj, String),
    /// `delete chain`.
    DeleteChain(Obj, String),
    /// `add rule`.
    AddRule(Obj, String, Vec<Token>),
    /// `add set`.
    AddSet(Obj, SetDecl),
    /// `flush set`.
    FlushSet(Obj, String),
    /// `delete set`.
    DeleteSet(Obj, String),
    /// `delete chain|set|… … handle N`.
    DeleteHandle(Obj, String, u64),
}

/// A cursor over a script's tokens.
struct Cursor<'t> {
    toks: &'t [(Token, usize)],
    at: usize,
}

impl Cursor<'_> {
    fn line(&self) -> usize {
        self.toks.get(self.at).or(self.toks.last()).map_or(0, |t| t.1)
    }

    fn err(&self, what: impl Into<String>) -> CompileError {
        CompileError::at(self.line(), what)
    }

    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.at).map(|t| &t.0)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.at).map(|t| t.0.clone());
        self.at += 1;
        t
    }

    fn skip_ends(&mut self) {
        while self.peek() == Some(&Token::End) {
            self.at += 1;
        }
    }

    fn word(&mut self) -> Result<String, CompileError> {
        match self.next() {
            Some(Token::Word(w)) => Ok(w),
            other => Err(self.err(format!("a word expected, found {other:?}"))),
        }
    }

    fn expect(&mut self, t: Token) -> Result<(), CompileError> {
        match self.next() {
            Some(found) if found == t => Ok(()),
            other => Err(self.err(format!("{t:?} expected, found {other:?}"))),
        }
    }

    fn keyword(&mut self, k: &str) -> Result<(), CompileError> {
        match self.word()? {
            w if w == k => Ok(()),
            w => Err(self.err(format!("`{k}` expected, found `{w}`"))),
        }
    }

    fn string(&mut self) -> Result<String, CompileError> {
        match self.next() {
            Some(Token::Str(s)) => Ok(s),
            other => Err(self.err(format!("a string expected, found {other:?}"))),
        }
    }

    /// Tokens up to the end of the statement (not taking the end): a `;`, a line's end or a
    /// block's `}`, outside any `{ … }` the statement holds (an anonymous set).
    fn statement(&mut self) -> Vec<Token> {
        let mut out = Vec::new();
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t {
                Token::End | Token::Close if depth == 0 => break,
                Token::Open => depth += 1,
                Token::Close => depth -= 1,
                _ => {}
            }
            out.push(t.clone());
            self.at += 1;
        }
        out
    }

    fn obj(&mut self) -> Result<Obj, CompileError> {
        let family = match self.word()?.as_str() {
            "ip" => Family::V4,
            "ip6" => Family::V6,
            f => return Err(self.err(format!("family `{f}` is not one of this proxy's"))),
        };
        Ok(Obj { family, table: self.word()? })
    }
}

/// Parses a whole script: each command with the line it starts on.
pub fn parse(toks: &[(Token, usize)]) -> Result<Vec<(Command, usize)>, CompileError> {
    let mut c = Cursor { toks, at: 0 };
    let mut out = Vec::new();
    loop {
        c.skip_ends();
        if c.peek().is_none() {
            return Ok(out);
        }
        let line = c.line();
        out.push((command(&mut c)?, line));
    }
}

fn command(c: &mut Cursor) -> Result<Command, CompileError> {
    let verb = c.word()?;
    if verb == "table" {
        return table_block(c);
    }
    let noun = c.word()?;
    let obj = c.obj()?;
    Ok(match (verb.as_str(), noun.as_str()) {
        ("add", "table") => Command::AddTable(obj),
        ("delete", "table") => Command::DeleteTable(obj),
        ("flush", "table") => Command::FlushTable(obj),
        ("add", "chain") => Command::AddChain(obj, c.word()?),
        ("flush", "chain") => Command::FlushChain(obj, c.word()?),
        ("add", "rule") => {
            let chain = c.word()?;
            Command::AddRule(obj, chain, c.statement())
        }
        ("add", "set" | "map") => {
            let name = c.word()?;
            c.expect(Token::Open)?;
            let mut decl = set_body(c, name)?;
            decl.map = noun == "map" || !decl.data.is_empty();
            Command::AddSet(obj, decl)
        }
        ("flush", "set" | "map") => Command::FlushSet(obj, c.word()?),
        ("delete", kind) => {
            let name = c.word()?;
            if name == "handle" {
                let handle = c.word()?.parse().map_err(|_| c.err("a handle number expected"))?;
                Command::DeleteHandle(obj, kind.to_string(), handle)
            } else {
                match kind {
                    "chain" => Command::DeleteChain(obj, name),
                    "set" | "map" => Command::DeleteSet(obj, name),
                    _ => return Err(c.err(format!("`delete {kind}` by name is not supported"))),
                }
            }
        }
        _ => return Err(c.err(format!("`{verb} {noun}` is not a command this compiler takes"))),
    })
}

fn table_block(c: &mut Cursor) -> Result<Command, CompileError> {
    let obj = c.obj()?;
    c.expect(Token::Open)?;
    let (mut comment, mut flags, mut sets, mut chains) = (None, 0, Vec::new(), Vec::new());
    loop {
        c.skip_ends();
        match c.next() {
            Some(Token::Close) => return Ok(Command::Table { obj, comment, flags, sets, chains }),
            Some(Token::Word(w)) if w == "comment" => comment = Some(c.string()?),
            Some(Token::Word(w)) if w == "flags" => flags |= table_flags(c)?,
            Some(Token::Word(w)) if w == "set" || w == "map" => {
                let name = c.word()?;
                c.expect(Token::Open)?;
                let mut decl = set_body(c, name)?;
                decl.map = w == "map";
                sets.push(decl);
            }
            Some(Token::Word(w)) if w == "chain" => chains.push(chain_body(c)?),
            other => return Err(c.err(format!("unexpected {other:?} in a table"))),
        }
    }
}

/// A table's `flags` words: `owner` only (a dormant table, the other flag, would hold rules
/// that never run).
fn table_flags(c: &mut Cursor) -> Result<u32, CompileError> {
    let mut flags = 0;
    for t in c.statement() {
        match t {
            Token::Word(w) if w == "owner" => flags |= NFT_TABLE_F_OWNER,
            Token::Comma => {}
            Token::Word(w) => return Err(c.err(format!("table flag `{w}`: only `owner` is known"))),
            other => return Err(c.err(format!("unexpected {other:?} among a table's flags"))),
        }
    }
    match flags {
        0 => Err(c.err("`flags` without a flag")),
        f => Ok(f),
    }
}

fn set_body(c: &mut Cursor, name: String) -> Result<SetDecl, CompileError> {
    let mut d = SetDecl { name, line: c.line(), ..SetDecl::default() };
    loop {
        c.skip_ends();
        match c.next() {
            Some(Token::Close) => return Ok(d),
            Some(Token::Word(w)) => match w.as_str() {
                "type" | "typeof" => {
                    d.typeof_ = w == "typeof";
                    let toks = c.statement();
                    let mut halves = toks.split(|t| *t == Token::Colon);
                    let fields = |h: Option<&[Token]>| -> Vec<Vec<Token>> {
                        h.map(|h| h.split(|t| *t == Token::Dot).map(<[Token]>::to_vec).collect()).unwrap_or_default()
                    };
                    d.key = fields(halves.next());
                    d.data = fields(halves.next());
                }
                "flags" => {
                    let toks = c.statement();
                    d.flags =
                        toks.into_iter().filter_map(|t| if let Token::Word(w) = t { Some(w) } else { None }).collect();
                }
                "timeout" => d.timeout = Some(seconds(&c.word()?).ok_or_else(|| c.err("a timeout in seconds"))?),
                "size" => d.size = Some(c.word()?.parse().map_err(|_| c.err("a size"))?),
                "comment" => d.comment = Some(c.string()?),
                other => return Err(c.err(format!("`{other}` in a set"))),
            },
            other => return Err(c.err(format!("unexpected {other:?} in a set"))),
        }
    }
}

/// `30s` or `30` as seconds.
pub(super) fn seconds(w: &str) -> Option<u64> {
    w.strip_suffix('s').unwrap_or(w).parse().ok()
}

fn chain_body(c: &mut Cursor) -> Result<ChainDecl, CompileError> {
    let name = c.word()?;
    c.expect(Token::Open)?;
    let mut chain = ChainDecl { name, hook: None, rules: Vec::new(), line: c.line() };
    loop {
        c.skip_ends();
        match c.peek() {
            Some(Token::Close) => {
                c.next();
                return Ok(chain);
            }
            Some(Token::Word(w)) if w == "type" && chain.hook.is_none() && chain.rules.is_empty() => {
                c.next();
                let kind = c.word()?;
                c.keyword("hook")?;
                let hook = c.word()?;
                c.keyword("priority")?;
                let priority = c.word()?.parse().map_err(|_| c.err("a numeric priority"))?;
                c.expect(Token::End)?;
                c.keyword("policy")?;
                c.keyword("accept")?;
                chain.hook = Some(Hook { kind, hook, priority });
            }
            Some(_) => {
                let line = c.line();
                chain.rules.push((line, c.statement()));
            }
            None => return Err(c.err("a chain without its end")),
        }
    }
}
