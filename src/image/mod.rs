//! Images: references, the registry client, verification, rkt's CAS and tree
//! store, and docker-to-ACI conversion. Only this module writes `$D/cas`.
//!
//! Not built yet (issue 3); the ImageService answers UNIMPLEMENTED meanwhile.
