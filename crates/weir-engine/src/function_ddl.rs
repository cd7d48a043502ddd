//! `CREATE FUNCTION name AS 'identifier'` and `DROP FUNCTION name`: Weir runs no Java, so
//! an identifier names a function registered in the session (built in, or registered by
//! the program through [`Engine::register_udf`]). The identifier's last segment is the
//! function's name as written, in lower case, or in snake case: the Nexmark suite's
//! `CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar'` binds
//! `count_char`.

use crate::engine::{Engine, Outcome};
use weir_common::{Error, Result};

/// `CountChar` → `count_char`.
fn snake_case(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

impl Engine {
    /// Names of the scalar and aggregate functions the session can call.
    fn function_names(&self) -> Vec<String> {
        let state = self.planner().session().state();
        let mut names: Vec<String> = state
            .scalar_functions()
            .keys()
            .chain(state.aggregate_functions().keys())
            .cloned()
            .collect();
        names.sort();
        names
    }

    pub(crate) fn create_function(
        &mut self,
        name: &str,
        identifier: &str,
        if_not_exists: bool,
    ) -> Result<Outcome> {
        let known = self.function_names();
        if known.iter().any(|k| k.eq_ignore_ascii_case(name)) && !self.bound.contains_key(name) {
            // A function of that name is already callable (e.g. `count_char` itself).
            if let Some(target) = self.resolve(identifier, &known)
                && target.eq_ignore_ascii_case(name)
            {
                self.bound.insert(name.to_string(), target);
                return Ok(Outcome::Done(format!("function '{name}' created")));
            }
        }
        if self.bound.contains_key(name) {
            if if_not_exists {
                return Ok(Outcome::Done(format!("function '{name}' exists")));
            }
            return Err(Error::plan(format!("function '{name}' already exists")));
        }
        let Some(target) = self.resolve(identifier, &known) else {
            let last = identifier.rsplit('.').next().unwrap_or(identifier);
            let registered: Vec<&String> = self.registered.iter().collect();
            return Err(Error::plan(format!(
                "CREATE FUNCTION {name}: no function named '{last}' (or '{}') is registered; \
                 Weir runs no Java: register a Rust function with Engine::register_udf and \
                 bind it by its name. Registered by the program: {}",
                snake_case(last),
                if registered.is_empty() {
                    "none".to_string()
                } else {
                    registered
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        };
        let session = self.planner().session();
        let state = session.state();
        // DataFusion's aliases are `&'static str`: one small string per CREATE FUNCTION
        // statement lives as long as the process.
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        if let Some(udf) = state.scalar_functions().get(&target) {
            session.register_udf(udf.as_ref().clone().with_aliases([name]));
        } else if let Some(udaf) = state.aggregate_functions().get(&target) {
            session.register_udaf(udaf.as_ref().clone().with_aliases([name]));
        }
        self.bound.insert(name.to_string(), target);
        Ok(Outcome::Done(format!("function '{name}' created")))
    }

    /// The registered function `identifier` names (see the module docs).
    fn resolve(&self, identifier: &str, known: &[String]) -> Option<String> {
        let last = identifier.rsplit('.').next().unwrap_or(identifier);
        let candidates = [last.to_string(), last.to_lowercase(), snake_case(last)];
        candidates
            .iter()
            .find_map(|c| known.iter().find(|k| *k == c))
            .cloned()
    }

    pub(crate) fn drop_function(&mut self, name: &str, if_exists: bool) -> Result<Outcome> {
        let Some(target) = self.bound.remove(name) else {
            if if_exists {
                return Ok(Outcome::Done(format!("no function '{name}'")));
            }
            return Err(Error::plan(format!(
                "DROP FUNCTION: no function '{name}' was created with CREATE FUNCTION"
            )));
        };
        // The name is forgotten unless it is the bound function's own name (a function
        // the program registered stays callable).
        if target != name {
            let session = self.planner().session();
            session.deregister_udf(name);
            session.deregister_udaf(name);
        }
        Ok(Outcome::Done(format!("function '{name}' dropped")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn class_names_become_snake_case() {
        assert_eq!(super::snake_case("CountChar"), "count_char");
        assert_eq!(super::snake_case("lower"), "lower");
    }
}
