//! The code feature at the edge: `POST /code/run` and the git endpoints of
//! the API port (`api`), and the code-interpreter port ([`port`], with
//! the request bodies it checks in [`wire`]), both over `abx_domain::code`.

pub(crate) mod api;
pub mod port;
pub mod wire;
