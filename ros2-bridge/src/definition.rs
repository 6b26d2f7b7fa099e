//! Message definitions: the text that makes a recording's CDR messages
//! readable without ROS (MCAP's `ros2msg` schema encoding, as rosbag2
//! writes it).
//!
//! A definition is the type's own `.msg` file, then each type it uses,
//! directly or not, once, after a separator line of 80 `=` and a line
//! `MSG: pkg/Name` (the order readers expect: `mcap-ros2-support`,
//! Foxglove). The `.msg` files are those the ROS 2 prefix installs,
//! `PREFIX/share/PKG/msg/NAME.msg`, found through `AMENT_PREFIX_PATH`
//! (the prefixes, `:`-separated), as `ros2 interface show` finds them.

use std::path::{Path, PathBuf};

/// The line between a definition's messages.
const SEPARATOR: &str = "================================================================================";

/// Built-in field types: not messages, nothing to include.
const PRIMITIVES: &[&str] = &[
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "string", "wstring",
];

/// Why a type's definition could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("{0:?} is not a message type name (pkg/msg/Name)")]
    Name(String),
    #[error(
        "no {file} under AMENT_PREFIX_PATH ({prefixes}); source the environment that ros2-bridge/setup-ros2.sh prints"
    )]
    Missing { file: String, prefixes: String },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
}

/// The definition of `type_name` (`pkg/msg/Name` or `pkg/Name`), read from
/// the `.msg` files under `$AMENT_PREFIX_PATH`.
pub fn definition(type_name: &str) -> Result<String, DefinitionError> {
    let prefixes = std::env::var("AMENT_PREFIX_PATH").unwrap_or_default();
    let roots: Vec<PathBuf> = std::env::split_paths(&prefixes).filter(|p| !p.as_os_str().is_empty()).collect();
    definition_in(&roots, type_name)
}

/// [`definition`], with the `.msg` files under `roots` (install prefixes).
pub fn definition_in(roots: &[PathBuf], type_name: &str) -> Result<String, DefinitionError> {
    let (pkg, name) = split(type_name).ok_or_else(|| DefinitionError::Name(type_name.into()))?;
    let read = |pkg: &str, name: &str| -> Result<String, DefinitionError> {
        let file = Path::new("share").join(pkg).join("msg").join(format!("{name}.msg"));
        let path =
            roots.iter().map(|r| r.join(&file)).find(|p| p.is_file()).ok_or_else(|| DefinitionError::Missing {
                file: file.display().to_string(),
                prefixes: std::env::join_paths(roots).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            })?;
        std::fs::read_to_string(&path).map_err(|source| DefinitionError::Read { path, source })
    };
    let root = read(&pkg, &name)?;
    let mut out = root.trim_end().to_string();
    // Depth first, each type once, in the order fields name them.
    let mut done: Vec<String> = vec![format!("{pkg}/{name}")];
    let mut todo: Vec<String> = dependencies(&pkg, &root).into_iter().rev().collect();
    while let Some(dep) = todo.pop() {
        if done.contains(&dep) {
            continue;
        }
        let (p, n) = split(&dep).ok_or_else(|| DefinitionError::Name(dep.clone()))?;
        let text = read(&p, &n)?;
        out.push_str(&format!("\n{SEPARATOR}\nMSG: {dep}\n{}", text.trim_end()));
        todo.extend(dependencies(&p, &text).into_iter().rev());
        done.push(dep);
    }
    out.push('\n');
    Ok(out)
}

/// `pkg/msg/Name` or `pkg/Name` as (pkg, Name).
fn split(type_name: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = type_name.split('/').collect();
    match parts[..] {
        [pkg, "msg", name] | [pkg, name] if !pkg.is_empty() && !name.is_empty() => {
            Some((pkg.to_string(), name.to_string()))
        }
        _ => None,
    }
}

/// The message types (`pkg/Name`) that the fields of `text`, a `.msg` of
/// package `pkg`, use, in order; constants are of primitive types.
fn dependencies(pkg: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        let Some(ty) = line.split_whitespace().next() else { continue };
        // `float64[9]`, `Point[]`, `string<=10`, `int32[<=5]`: the element type.
        let base = ty.split(['[', '<']).next().unwrap_or_default();
        if base.is_empty() || PRIMITIVES.contains(&base) {
            continue;
        }
        let full = match split(base) {
            Some((p, n)) => format!("{p}/{n}"),
            // A type of the same package.
            None => format!("{pkg}/{base}"),
        };
        if !out.contains(&full) {
            out.push(full);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join("share").join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn includes_every_dependency_once_after_a_separator() {
        let dir = prefix(&[
            ("geometry_msgs/msg/PoseStamped.msg", "# A pose\nstd_msgs/Header header\nPose pose\n"),
            ("geometry_msgs/msg/Pose.msg", "Point position\nQuaternion orientation\n"),
            ("geometry_msgs/msg/Point.msg", "float64 x\nfloat64 y\nfloat64 z\n"),
            ("geometry_msgs/msg/Quaternion.msg", "float64 x 0\nfloat64 w 1  # default\n"),
            ("std_msgs/msg/Header.msg", "builtin_interfaces/Time stamp\nstring frame_id\n"),
            ("builtin_interfaces/msg/Time.msg", "int32 sec\nuint32 nanosec\nint32 MAX=5\n"),
        ]);
        let text = definition_in(&[dir.path().to_path_buf()], "geometry_msgs/msg/PoseStamped").unwrap();
        let sep = format!("\n{SEPARATOR}\n");
        let parts: Vec<&str> = text.split(&sep).collect();
        assert_eq!(parts[0], "# A pose\nstd_msgs/Header header\nPose pose");
        let names: Vec<&str> = parts[1..].iter().map(|p| p.lines().next().unwrap()).collect();
        assert_eq!(
            names,
            [
                "MSG: std_msgs/Header",
                "MSG: builtin_interfaces/Time",
                "MSG: geometry_msgs/Pose",
                "MSG: geometry_msgs/Point",
                "MSG: geometry_msgs/Quaternion"
            ]
        );
        assert!(text.ends_with("float64 w 1  # default\n"), "{text}");
    }

    #[test]
    fn array_and_bounded_types_name_their_element_type() {
        assert_eq!(
            dependencies("sensor_msgs", "PointField[] fields\nfloat64[9] k\nstring<=8 s\nstd_msgs/Header[<=2] h\n"),
            ["sensor_msgs/PointField", "std_msgs/Header"]
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = prefix(&[("a/msg/A.msg", "b/B inner\n")]);
        let e = definition_in(&[dir.path().to_path_buf()], "a/msg/A").unwrap_err().to_string();
        assert!(e.contains("share/b/msg/B.msg") && e.contains("setup-ros2.sh"), "{e}");
        assert!(definition_in(&[], "nope").is_err());
    }
}
