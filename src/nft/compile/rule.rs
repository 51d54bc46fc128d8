//! One rule's text to the kernel's expressions, as `nft` 1.0.6 compiles the same text:
//! matches, lookups in named and anonymous sets, marks, NAT, verdicts. Registers are
//! allocated per statement from the first, concatenations in consecutive 32-bit slots, a
//! hash's fields after the key (and after a NAT's address register) as `nft` allocates them;
//! a `tcp dport` is preceded by the `meta l4proto tcp` match it depends on unless the rule
//! already matched the protocol; an interval set's host-order key fields are converted.

use super::expr::{Data, Expr};
use super::field::{Field, Kind, constant_target, prefix_byte, reg, scratch, slots};
use super::lex::Token;
use super::{AnonSet, CompileError, Schema};
use crate::model::Family;
use crate::netlink::abi::{NF_ACCEPT, NF_DROP, NFT_GOTO, NFT_JUMP, NFT_META_IIFNAME, NFT_META_L4PROTO, NFT_META_MARK};

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
    let mut r = Rule { t, i: 0, family, out: Compiled::default(), proto: None, reserved: 0, schema };
    while r.i < t.len() {
        r.statement()?;
    }
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

    fn verdict(&mut self, code: i32, chain: Option<String>) {
        self.push(Expr::Immediate { dreg: 0, data: Data::Verdict(code, chain) });
    }

    fn statement(&mut self) -> Result<(), CompileError> {
        match (self.word(0), self.word(1)) {
            (v @ ("jump" | "goto"), chain) if !chain.is_empty() => {
                let code = if v == "jump" { NFT_JUMP } else { NFT_GOTO };
                let chain = chain.to_string();
                self.verdict(code, Some(chain));
                self.i += 2;
            }
            ("drop", _) => self.simple(NF_DROP),
            ("accept", _) => self.simple(NF_ACCEPT),
            ("masquerade", rest) => {
                let random = rest == "fully-random";
                self.push(Expr::Masq { flags: if random { 0x10 } else { 0 } });
                self.i += 1 + usize::from(random);
            }
            ("reject", "with") if self.word(2) == "tcp" && self.word(3) == "reset" => {
                self.push(Expr::Reject { kind: 1, code: 0 });
                self.i += 4;
            }
            ("reject", _) => {
                // ICMP port unreachable: code 3 for IPv4, 4 for IPv6.
                self.push(Expr::Reject { kind: 0, code: if self.family == Family::V4 { 3 } else { 4 } });
                self.i += 1;
            }
            ("dnat", _) => self.dnat()?,
            ("update", _) => self.update()?,
            ("meta", "mark") if self.word(2) == "set" => self.set_mark()?,
            _ => self.relational()?,
        }
        Ok(())
    }

    fn simple(&mut self, code: i32) {
        self.verdict(code, None);
        self.i += 1;
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
            self.load_one(f, None);
            self.push(Expr::Cmp { sreg: 1, op, data: bytes });
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

    /// `meta mark set meta mark or|xor V`.
    fn set_mark(&mut self) -> Result<(), CompileError> {
        let (op, v) = (self.word(5).to_string(), self.word(6).to_string());
        if self.word(3) != "meta" || self.word(4) != "mark" {
            return Err(self.err("only `meta mark set meta mark or|xor V` is known"));
        }
        let f = Field::parse(&[Token::Word("meta".into()), Token::Word("mark".into())], self.family)?.0;
        let (bits, _) = f.constant(&v)?;
        let bits = u32::from_ne_bytes([bits[0], bits[1], bits[2], bits[3]]);
        let (mask, xor) = match op.as_str() {
            "or" => (!bits, bits),
            "xor" => (u32::MAX, bits),
            _ => return Err(self.err("`or` or `xor`")),
        };
        self.i += 7;
        self.push(Expr::Meta { key: NFT_META_MARK, dreg: 1 });
        self.push(Expr::Bitwise {
            sreg: 1,
            dreg: 1,
            mask: mask.to_ne_bytes().to_vec(),
            xor: xor.to_ne_bytes().to_vec(),
        });
        self.push(Expr::MetaSet { key: NFT_META_MARK, sreg: 1 });
        Ok(())
    }

    /// `dnat ip to <key> map @m` (an endpoint picked from a map) or `dnat ip to ADDR:PORT`.
    fn dnat(&mut self) -> Result<(), CompileError> {
        let family = if self.word(1) == "ip" { 2 } else { 10 };
        if self.word(2) != "to" {
            return Err(self.err("`dnat FAMILY to`"));
        }
        self.i += 3;
        let addr_len = if family == 2 { 4 } else { 16 };
        if let Some((addr, port)) = constant_target(self.word(0)) {
            self.i += 1;
            self.push(Expr::Immediate { dreg: 1, data: Data::Value(addr) });
            self.push(Expr::Immediate { dreg: 2, data: Data::Value(port.to_be_bytes().to_vec()) });
            self.push(Expr::Dnat { family, addr: 1, proto: 2, flags: 2 });
            return Ok(());
        }
        let fields = self.concat()?;
        if self.word(0) != "map" || self.tok(1) != Some(&Token::At) {
            return Err(self.err("`map @name` after a dnat key"));
        }
        self.i += 1;
        self.dependencies(&fields);
        // `nft` takes a 16-byte register for the NAT's address before the key.
        self.reserved = 4;
        self.lookup(&fields, false, Some(1))?;
        self.reserved = 0;
        self.push(Expr::Dnat { family, addr: 1, proto: reg(slots(addr_len)), flags: 0 });
        Ok(())
    }

    /// `update @set { key [timeout Ns] }`.
    fn update(&mut self) -> Result<(), CompileError> {
        if self.tok(1) != Some(&Token::At) || self.tok(3) != Some(&Token::Open) {
            return Err(self.err("`update @set { key }`"));
        }
        let name = self.word(2).to_string();
        self.i += 4;
        let fields = self.concat()?;
        let timeout_ms = match self.word(0) {
            "timeout" => {
                let seconds = super::parse::seconds(self.word(1)).ok_or_else(|| self.err("a timeout in seconds"))?;
                self.i += 2;
                Some(seconds * 1000)
            }
            _ => None,
        };
        if self.tok(0) != Some(&Token::Close) {
            return Err(self.err("`}` after an update's key"));
        }
        self.i += 1;
        let set = self.schema.set(self.family, &name).ok_or_else(|| self.err("a set not declared"))?;
        self.dependencies(&fields);
        self.load(&fields, false);
        self.push(Expr::DynsetUpdate { sreg: 1, set: name, set_id: set.id, timeout_ms });
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

    /// `field [!=] { prefix, … }`: an anonymous interval set of the prefixes.
    fn anon_set(&mut self, fields: &[Field], invert: bool) -> Result<(), CompileError> {
        let [f] = fields else { return Err(self.err("an anonymous set of a concatenation")) };
        let mut ranges = Vec::new();
        for item in self.braced()? {
            let [Token::Word(w)] = item.as_slice() else { return Err(self.err("a prefix in an anonymous set")) };
            let (bytes, prefix) = f.constant(w)?;
            ranges.push((bytes, prefix.unwrap_or(f.kind.len() * 8)));
        }
        let set = self.schema.anon_interval(*f, &ranges);
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
