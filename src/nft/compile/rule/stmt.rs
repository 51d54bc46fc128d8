//! The statements of a rule that act rather than match: verdicts, masquerade, reject, NAT,
//! set updates, setting the mark or the trace flag, and packet rate limits, as `nft` 1.0.6
//! compiles them. Each one ends a run of header matches `nft` may merge (`merge`).

use super::super::expr::{Data, Expr};
use super::super::field::{Field, constant_target, reg, slots};
use super::super::lex::Token;
use super::{CompileError, Rule};
use crate::model::Family;
use crate::netlink::abi::{NF_ACCEPT, NF_DROP, NFT_GOTO, NFT_JUMP, NFT_LIMIT_F_INV, NFT_META_MARK, NFT_META_NFTRACE};

impl Rule<'_> {
    /// Compiles the statement at the cursor if it acts; `false` (nothing taken) if it is a
    /// match.
    pub(super) fn action(&mut self) -> Result<bool, CompileError> {
        let acts = match (self.word(0), self.word(1)) {
            ("jump" | "goto", chain) => !chain.is_empty(),
            ("meta", "mark" | "nftrace") => self.word(2) == "set",
            (w, _) => ["drop", "accept", "masquerade", "reject", "dnat", "update", "limit"].contains(&w),
        };
        if !acts {
            return Ok(false);
        }
        // `nft` merges no header matches across a statement that is not a match.
        self.boundary();
        match (self.word(0), self.word(1)) {
            (v @ ("jump" | "goto"), chain) => {
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
            ("meta", "mark") => self.set_mark()?,
            ("meta", _) => self.set_nftrace()?,
            _ => self.limit()?,
        }
        Ok(true)
    }

    fn verdict(&mut self, code: i32, chain: Option<String>) {
        self.push(Expr::Immediate { dreg: 0, data: Data::Verdict(code, chain) });
    }

    fn simple(&mut self, code: i32) {
        self.verdict(code, None);
        self.i += 1;
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
                let seconds =
                    super::super::parse::seconds(self.word(1)).ok_or_else(|| self.err("a timeout in seconds"))?;
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

    /// `meta nftrace set 0|1`: the packet's trace flag, one byte in a register, as `nft`
    /// writes it; a traced packet is reported rule by rule to trace listeners.
    fn set_nftrace(&mut self) -> Result<(), CompileError> {
        let on = match self.word(3) {
            "0" => 0,
            "1" => 1,
            _ => return Err(self.err("`meta nftrace set 0|1`")),
        };
        self.i += 4;
        self.push(Expr::Immediate { dreg: 1, data: Data::Value(vec![on]) });
        self.push(Expr::MetaSet { key: NFT_META_NFTRACE, sreg: 1 });
        Ok(())
    }

    /// `limit rate [over] N/UNIT [burst M packets]`: a packet rate limit; `nft` makes the
    /// burst 5 packets when none is given, and refuses a burst of 0. Byte rates are not taken.
    fn limit(&mut self) -> Result<(), CompileError> {
        if self.word(1) != "rate" {
            return Err(self.err("`limit rate N/UNIT`"));
        }
        self.i += 2;
        let over = self.word(0) == "over";
        self.i += usize::from(over);
        let (rate, unit) = self.word(0).split_once('/').ok_or_else(|| self.err("a packet rate `N/UNIT`"))?;
        let rate: u64 = rate.parse().map_err(|_| self.err("a packet rate `N/UNIT`"))?;
        let unit = match unit {
            "second" => 1,
            "minute" => 60,
            "hour" => 3_600,
            "day" => 86_400,
            "week" => 604_800,
            _ => return Err(self.err("a rate's unit: second, minute, hour, day or week")),
        };
        self.i += 1;
        let mut burst = 5;
        if self.word(0) == "burst" {
            burst = self.word(1).parse().map_err(|_| self.err("a burst of packets"))?;
            if burst == 0 || self.word(2) != "packets" {
                return Err(self.err("`burst M packets`, M above 0"));
            }
            self.i += 3;
        }
        self.push(Expr::Limit { rate, unit, burst, flags: if over { NFT_LIMIT_F_INV } else { 0 } });
        Ok(())
    }
}
