// Package wireprev is a frozen copy of the SDK's wire package (sdk/wire) as
// the previous SDK release shipped it: protocol 1, segment and manifest
// schema versions 1 and 2, takedowns (`td`) but no playhead time (`p`). Apps
// in the field keep running that decoder for months after a release, so its
// behaviour is part of our compatibility contract: it must read what today's
// slicer and edge write (ignoring fields it does not know), and it must
// refuse — with its ErrVersion, never a panic or a half-decoded message — a
// schema version newer than it knows. compat_test.go pins both against
// today's encoders.
//
// Do not edit these files except to re-freeze them from a later release;
// nothing outside the tests imports this package.
package wireprev
