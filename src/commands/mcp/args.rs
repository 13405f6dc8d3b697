//! A tool's arguments as the MCP server parses them: `Checked<T>` turns arguments that do
//! not fit a tool's schema into the same typed tool error as any other bad input.

use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use agentvfs::Error;

use super::error_value;

/// A tool's arguments, parsed: arguments that do not fit the tool's input schema (a wrong
/// type, an unknown or missing field) are a tool error of kind `invalid_argument`, as any
/// other bad input is, rather than a protocol error with only text, so the agent can read
/// and fix them (MCP treats input validation errors as tool execution errors). Its schema
/// is the parameters' own.
pub struct Checked<T>(pub std::result::Result<T, CallToolResult>);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Checked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(Checked(serde_path_to_error::deserialize(value).map_err(
            |e| {
                let e = Error::invalid(unfit(&e.path().to_string(), &e.inner().to_string()));
                CallToolResult::structured_error(error_value(&e))
            },
        )))
    }
}

/// The message for arguments that do not fit a tool's schema: the field (`path`, `.` for
/// the arguments as a whole) and what was wrong, in the schema's words rather than Rust's.
fn unfit(path: &str, problem: &str) -> String {
    let mut problem = problem.to_string();
    for (rust, schema) in [
        ("expected i64", "expected an integer (64-bit)"),
        ("expected usize", "expected an integer of 0 or more"),
        ("expected a boolean", "expected true or false"),
    ] {
        problem = problem.replace(rust, schema);
    }
    // An unknown field's path is the field itself, which serde's message already names.
    match path {
        "." => format!("the tool's arguments do not fit its schema: {problem}"),
        _ if problem.starts_with("unknown field") => {
            format!("the tool's arguments do not fit its schema: {problem}")
        }
        field => format!("the tool's argument `{field}` does not fit its schema: {problem}"),
    }
}

impl<T: JsonSchema> JsonSchema for Checked<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ListFilesParams, OpLogParams, ReadFileParams, WriteFileParams};
    use super::*;
    use serde_json::json;

    fn message<T: serde::de::DeserializeOwned>(args: Value) -> String {
        let Checked(out) = serde_json::from_value::<Checked<T>>(args).unwrap();
        let refused = out.err().expect("refused");
        let error = refused.structured_content.expect("structured");
        assert_eq!(error["kind"], "invalid_argument", "{error}");
        error["message"].as_str().unwrap().to_string()
    }

    #[test]
    fn arguments_that_do_not_fit_name_the_field_in_the_schemas_words() {
        let m = message::<OpLogParams>(json!({ "limit": -1 }));
        assert!(
            m.contains("argument `limit`") && m.contains("an integer of 0 or more"),
            "{m}"
        );
        let m = message::<WriteFileParams>(json!({ "path": "a", "content": "x", "if_head": "7" }));
        assert!(
            m.contains("`if_head`") && m.contains("an integer (64-bit)"),
            "{m}"
        );
        let m = message::<WriteFileParams>(
            json!({ "path": "a", "content": "x", "if_head": 9223372036854775808u64 }),
        );
        assert!(m.contains("`if_head`") && m.contains("(64-bit)"), "{m}");
        let m = message::<ReadFileParams>(json!({ "path": "a", "nope": 1 }));
        assert!(
            m.contains("the tool's arguments do not fit its schema: unknown field `nope`"),
            "{m}"
        );
        let m = message::<ReadFileParams>(json!({}));
        assert!(m.contains("missing field `path`"), "{m}");
        let m = message::<ListFilesParams>(json!({ "all": "yes" }));
        assert!(m.contains("`all`") && m.contains("true or false"), "{m}");
    }
}
