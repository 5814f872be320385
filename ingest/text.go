package ingest

import "danmaku/internal/ident"

// normalize returns comment text as it is stored: ident.CleanText, the one
// rule for shown text (nicknames follow it too). NFC; control and format
// characters removed — zero-width characters (U+200B-U+200D, U+2060,
// U+FEFF), bidi embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) and directional marks (U+200E, U+200F, U+061C) among them;
// runs of white space collapsed to one space; trimmed. Format characters go
// because they let a spammer defeat duplicate suppression and word filters
// with invisible variants, and a bidi override would turn the rest of a
// viewer's screen line around.
//
// Invalid UTF-8 never gets here from a client: httpx.BindJSON refuses the
// body (400 bad_utf8) before encoding/json could turn the bytes into a
// visible U+FFFD, and refuses unpaired surrogate escapes ("\ud800") the same
// way. CleanText drops such bytes only as a last line of defence.
func normalize(s string) string { return ident.CleanText(s) }
