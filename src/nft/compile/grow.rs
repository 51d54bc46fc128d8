//! A map declared again, larger: the message a partial sync sends before it adds the elements
//! that would pass the map's size (`nft::sizes`).

use super::parse::Obj;
use super::{CompileError, Out, Schema, SetSpec};
use crate::model::Family;
use crate::nft::wire::Batch;

/// Declares `family`'s map `name` again in `batch`, as it was declared but for `size`: the
/// kernel (since Linux 6.5) raises the limit of the map it holds, keeping its elements and
/// its hash table.
pub fn grow(schema: &mut Schema, batch: &mut Batch, family: Family, name: &str, size: u32) -> Result<(), CompileError> {
    let Some((_, spec)) = schema.sets.get(&(family, name.to_string())) else {
        return Err(CompileError::new(format!("{name}, to be declared larger, was never declared")));
    };
    let spec = SetSpec { size: Some(size), ..spec.clone() };
    let obj = Obj { family, table: crate::render::TABLE_NAME.to_string() };
    let id = schema.id();
    Out::new(batch, schema, 0).new_set(&obj, &spec, id);
    Ok(())
}
