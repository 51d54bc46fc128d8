//! One rule's text to the kernel's expressions, as `nft` 1.0.6 compiles the same text:
//! matches, lookups in named and anonymous sets (of prefixes, or of values such as
//! `meta l4proto { tcp, udp }`), and the statements that act (`stmt`): marks, the trace
//! flag, rate limits, NAT, verdicts. Registers are allocated per statement from the first,
//! concatenations in consecutive 32-bit slots, a hash's fields after the key (and after a
//! NAT's address register) as `nft` allocates them; a `tcp dport` is preceded by the
//! `meta l4proto tcp` match it depends on unless the rule already matched the protocol; an
//! interval set's host-order key fields are converted; adjacent header matches merge into
//! one load as `nft` merges them (`merge`).

mod merge;
mod stmt;

use super::expr::{Data, Expr};
use super::field::{Field, Kind, prefix_byte, reg, scratch, slots};
use super::lex::Token;
use super::{AnonSet, CompileError, Schema};
use crate::model::Family;
use crate::netlink::abi::{NFT_GOTO, NFT_JUMP, NFT_META_IIFNAME, NFT_META_L4PROTO};

/// A compiled rule: the anonymous sets it needs first, and its expressions.
#[derive(Debug, Default)]
pub struct Compiled {
    /// Anonymous sets, to be created (with their elements) before the rule.
    pub anon: Vec<AnonSet>,
    /// The expressions.
    pub exprs: Vec<Expr>,
}

/// Compiles the rule `t` of a table of `family`; `schema` knows the named sets, and hands
/// out the ids of anonymous ones.
pub fn compile(t: &[Token], family: Family, schema: &mut Schema) -> Result<Compiled, CompileError> {
    let mut r = Rule { t, i: 0, family, out: Compiled::default(), proto: None, reserved: 0, run: Vec::new(), schema };
    while r.i < t.len() {
        if !r.action()? {
            r.relational()?;
        }
    }
    r.merge();
    Ok(r.out)
}

struct Rule<'a> {
    t: &'a [Token],
    i: usize,
    family: Family,
    out: Compiled,
    /// The transport protocol a match already established.
    proto: Option<u8>,
    /// Slots a statement took before its key (a NAT's address register), which a hash's
    /// fields go after.
    reserved: u32,
    /// The header matches `nft` may yet merge (`merge`).
    run: Vec<merge::Match>,
    schema: &'a mut Schema,
}

impl Rule<'_> {
    fn word(&self, k: usize) -> &str {
        match self.t.get(self.i + k) {
            Some(Token::Word(w)) => w,
            _ => "",
        }
    }

    fn tok(&self, k: usize) -> Option<&Token> {
        self.t.get(self.i + k)
    }

    fn err(&self, what: &str) -> CompileError {
        CompileError::new(format!("{what} at {:?}", &self.t[self.i.min(self.t.len())..]))
    }

    fn push(&mut self, e: Expr) {
        self.out.exprs.push(e);
    }

    /// Loads one field, alone, into register 1 (`len`: a prefix's whole bytes).
    fn load_one(&mut self, f: &Field, len: Option<u32>) {
        self.out.exprs.extend(f.loads(0, len, scratch(&[*f], 0)));
    }

    /// `a . b . c`: the fields, loaded from slot 0 on; returns them with the slots used.
    fn concat(&mut self) -> Result<Vec<Field>, CompileError> {
        let mut fields = Vec::new();
        loop {
            let (f, n) = Field::parse(&self.t[self.i..], self.family)?;
            fields.push(f);
            self.i += n;
            if self.tok(0) != Some(&Token::Dot) {
                return Ok(fields);
            }
            self.i += 1;
        }
    }

    /// The `meta l4proto` match a transport header field depends on, when not yet matched.
    fn dependencies(&mut self, fields: &[Field]) {
        for p in fields.iter().filter_map(|f| f.needs_proto) {
            if self.proto != Some(p) {
                self.push(Expr::Meta { key: NFT_META_L4PROTO, dreg: 1 });
                self.push(Expr::Cmp { sreg: 1, op: 0, data: vec![p] });
                self.proto = Some(p);
            }
        }
    }

    /// Loads `fields` into consecutive slots from 0; `hton` converts host-order fields (an
    /// interval set's key). Returns the slots used.
    fn load(&mut self, fields: &[Field], hton: bool) -> u32 {
        let (mut slot, free) = (0, scratch(fields, self.reserved));
        for f in fields {
            self.out.exprs.extend(f.loads(slot, None, free));
            if hton && !f.kind.big_endian() {
                let r = reg(slot);
                self.push(Expr::Byteorder { sreg: r, dreg: r, op: 1, len: f.kind.len(), size: 2 });
            }
            slot += slots(f.kind.len());
        }
        slot
    }

    fn relational(&mut self) -> Result<(), CompileError> {
        let fields = self.concat()?;
        self.dependencies(&fields);
        let invert = self.tok(0) == Some(&Token::NotEq);
        if invert || self.tok(0) == Some(&Token::EqEq) {
            self.i += 1;
        }
        if fields[0].kind == Kind::Ifname {
            return self.interface(invert);
        }
        match (self.tok(0).cloned(), self.word(0)) {
            (Some(Token::At), _) => self.lookup(&fields, invert, None),
            (_, "vmap") => {
                // A verdict map is a verdict statement: no match merges across it.
                self.boundary();
                self.i += 1;
                if self.tok(0) == Some(&Token::Open) {
                    return self.anon_vmap(&fields);
                }
                self.lookup(&fields, false, Some(0))
            }
            (Some(Token::Open), _) => self.anon_set(&fields, invert),
            (Some(Token::And), _) => self.masked(&fields),
            (Some(Token::Word(v)), _) if fields.len() == 1 => self.compare(&fields[0], &v, invert),
            _ => Err(self.err("a match this compiler does not know")),
        }
    }

    fn lookup(&mut self, fields: &[Field], invert: bool, dreg: Option<u32>) -> Result<(), CompileError> {
        self.i += 1;
        let name = self.word(0).to_string();
        self.i += 1;
        let set = self.schema.set(self.family, &name).ok_or_else(|| self.err("a set not declared"))?;
        self.load(fields, set.interval);
        self.push(Expr::Lookup { sreg: 1, set: name, set_id: set.id, dreg, invert });
        Ok(())
    }

    /// `field [!=] value`: a constant, or an address prefix (compared on its whole bytes,
    /// masked when it ends within a byte), or an interface name (`*` for a prefix).
    fn compare(&mut self, f: &Field, v: &str, invert: bool) -> Result<(), CompileError> {
        self.i += 1;
        let op = u32::from(invert);
        let (mut bytes, prefix) = f.constant(v)?;
        if matches!(f.kind, Kind::CtState | Kind::CtStatus) && !invert {
            // A flag: set in the field, whatever the other bits.
            self.load_one(f, None);
            self.push(Expr::Bitwise { sreg: 1, dreg: 1, mask: bytes.clone(), xor: vec![0; bytes.len()] });
            self.push(Expr::Cmp { sreg: 1, op: 1, data: vec![0; bytes.len()] });
            return Ok(());
        }
        if f.kind == Kind::Proto
            && !invert
            && let Some(p) = bytes.first()
        {
            self.proto = Some(*p);
        }
        let Some(bits) = prefix else {
            let at = self.out.exprs.len();
            self.load_one(f, None);
            self.push(Expr::Cmp { sreg: 1, op, data: bytes });
            self.note(at);
            return Ok(());
        };
        if bits % 8 == 0 {
            // A prefix of whole bytes: only those bytes are loaded and compared.
            bytes.truncate((bits / 8) as usize);
            self.load_one(f, Some(bits / 8));
        } else {
            let mask: Vec<u8> = (0..bytes.len() as u32).map(|i| prefix_byte(bits, i)).collect();
            for (b, m) in bytes.iter_mut().zip(&mask) {
                *b &= m;
            }
            self.load_one(f, None);
            self.push(Expr::Bitwise { sreg: 1, dreg: 1, xor: vec![0; mask.len()], mask });
        }
        self.push(Expr::Cmp { sreg: 1, op, data: bytes });
        Ok(())
    }

    /// `field & mask != value`.
    fn masked(&mut self, fields: &[Field]) -> Result<(), CompileError> {
        let f = fields.first().ok_or_else(|| self.err("a mask without a field"))?;
        let (mask, _) = f.constant(self.word(1))?;
        let invert = self.tok(2) == Some(&Token::NotEq);
        let (value, _) = f.constant(self.word(3))?;
        self.i += 4;
        self.load_one(f, None);
        self.push(Expr::Bitwise { sreg: 1, dreg: 1, xor: vec![0; mask.len()], mask });
        self.push(Expr::Cmp { sreg: 1, op: u32::from(invert), data: value });
        Ok(())
    }

    /// `iifname [!=] "name"`: the whole name padded to `IFNAMSIZ`, or a prefix before `*`.
    fn interface(&mut self, invert: bool) -> Result<(), CompileError> {
        let Some(Token::Str(name)) = self.tok(0).cloned() else { return Err(self.err("an interface name")) };
        self.i += 1;
        let data = match name.strip_suffix('*') {
            Some(prefix) => prefix.as_bytes().to_vec(),
            None => {
                let mut b = name.as_bytes().to_vec();
                b.resize(16, 0);
                b
            }
        };
        self.push(Expr::Meta { key: NFT_META_IIFNAME, dreg: 1 });
        self.push(Expr::Cmp { sreg: 1, op: u32::from(invert), data });
        Ok(())
    }

    /// The words of a `{ a, b, … }` list (the `{` is next), each item's tokens.
    fn braced(&mut self) -> Result<Vec<Vec<Token>>, CompileError> {
        self.i += 1;
        let mut items = vec![Vec::new()];
        loop {
            match self.tok(0).cloned() {
                Some(Token::Close) => break,
                Some(Token::Comma) => items.push(Vec::new()),
                Some(t) => items.last_mut().map_or((), |i| i.push(t)),
                None => return Err(self.err("a `{` without its `}`")),
            }
            self.i += 1;
        }
        self.i += 1;
        items.retain(|i| !i.is_empty());
        Ok(items)
    }

    /// `field [!=] { value|prefix, … }`: an anonymous set, of intervals when a prefix is among
    /// its elements (`nft` makes a set of intervals only for an element that is not a single
    /// value), else of the values themselves (`meta l4proto { tcp, udp }`).
    fn anon_set(&mut self, fields: &[Field], invert: bool) -> Result<(), CompileError> {
        let [f] = fields else { return Err(self.err("an anonymous set of a concatenation")) };
        let mut items = Vec::new();
        for item in self.braced()? {
            let [Token::Word(w)] = item.as_slice() else { return Err(self.err("a value in an anonymous set")) };
            items.push(w.clone());
        }
        let set = if items.iter().any(|w| w.contains('/')) {
            let mut ranges = Vec::new();
            for w in &items {
                let (bytes, prefix) = f.constant(w)?;
                ranges.push((bytes, prefix.unwrap_or(f.kind.len() * 8)));
            }
            self.schema.anon_interval(*f, &ranges)
        } else {
            let keys = items.iter().map(|w| f.constant(w).map(|c| c.0)).collect::<Result<_, _>>()?;
            self.schema.anon_values(*f, keys)?
        };
        let (name, id) = (set.spec.name.clone(), Some(set.id));
        self.out.anon.push(set);
        self.load(fields, false);
        self.push(Expr::Lookup { sreg: 1, set: name, set_id: id, dreg: None, invert });
        Ok(())
    }

    /// `numgen random mod N vmap { 0 : goto a, … }`: an anonymous verdict map.
    fn anon_vmap(&mut self, fields: &[Field]) -> Result<(), CompileError> {
        let mut entries = Vec::new();
        for item in self.braced()? {
            match item.as_slice() {
                [Token::Word(k), Token::Colon, Token::Word(v), Token::Word(chain)] if v == "goto" || v == "jump" => {
                    let key: u32 = k.parse().map_err(|_| self.err("an integer key"))?;
                    let code = if v == "goto" { NFT_GOTO } else { NFT_JUMP };
                    entries.push((key, Data::Verdict(code, Some(chain.clone()))));
                }
                _ => return Err(self.err("`key : goto chain` in a verdict map")),
            }
        }
        let set = self.schema.anon_vmap(entries);
        let (name, id) = (set.spec.name.clone(), Some(set.id));
        self.out.anon.push(set);
        self.load(fields, false);
        self.push(Expr::Lookup { sreg: 1, set: name, set_id: id, dreg: Some(0), invert: false });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
