#version 450
// vt_quad_software.frag with deferred feedback (see vt_quad_deferred.frag): binding 0 the atlas,
// binding 1 the indirection (NEAREST), binding 2 the record buffer (write-only); the same push
// constants. Needs fragmentStoresAndAtomics (the record store); no sparse feature.
#extension GL_GOOGLE_include_directive : require
#define RESIDENCY_SOFTWARE 1
#define RESIDENCY_FEEDBACK_DEFERRED 1
#include "vt_quad.glsl"
