use crate::OnnxError;

/// A shape given on the command line for one input: `NAME=1x3x224x224`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShape {
    /// The graph input's name.
    pub name: String,
    /// Its dimensions.
    pub dims: Vec<usize>,
}

/// Parses `NAME=1x3x224x224` (also accepts `,` between dimensions).
pub fn parse_input_arg(arg: &str) -> Result<InputShape, OnnxError> {
    let bad = |why: &str| {
        OnnxError::BadArgument(format!(
            "--input `{arg}`: {why} (expected NAME=1x3x224x224)"
        ))
    };
    let (name, dims) = arg.rsplit_once('=').ok_or_else(|| bad("missing `=`"))?;
    if name.is_empty() {
        return Err(bad("empty input name"));
    }
    let dims = dims
        .split(['x', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| bad(&format!("`{d}` is not a dimension")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(InputShape {
        name: name.to_string(),
        dims,
    })
}

/// Parses `SYMBOL=VALUE`.
pub fn parse_dim_arg(arg: &str) -> Result<(String, i64), OnnxError> {
    let bad = |why: &str| {
        OnnxError::BadArgument(format!(
            "--dim `{arg}`: {why} (expected SYMBOL=VALUE, e.g. N=1)"
        ))
    };
    let (sym, value) = arg.split_once('=').ok_or_else(|| bad("missing `=`"))?;
    if sym.is_empty() {
        return Err(bad("empty symbol"));
    }
    let value: i64 = value
        .trim()
        .parse()
        .map_err(|_| bad("value is not an integer"))?;
    if value <= 0 {
        return Err(bad("value must be positive"));
    }
    Ok((sym.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_input_and_dim() {
        let s = parse_input_arg("image=1x3x224x224").unwrap();
        assert_eq!(s.name, "image");
        assert_eq!(s.dims, vec![1, 3, 224, 224]);
        assert!(parse_input_arg("image").is_err());
        assert!(parse_input_arg("image=1xZ").is_err());
        assert_eq!(parse_dim_arg("N=4").unwrap(), ("N".to_string(), 4));
        assert!(parse_dim_arg("N=0").is_err());
        assert!(parse_dim_arg("N").is_err());
    }
}
