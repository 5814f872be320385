package plan

import (
	"errors"
	"fmt"

	"danmaku/internal/strictjson"
)

// Codes of the errors this package returns. strictjson's codes (bad_json,
// bad_utf8) pass through for documents that are not JSON of the right shape.
const (
	// CodeBadVersion: the document's "v" is not one this build reads.
	CodeBadVersion = "bad_version"
	// CodeOldProfile: a profile of an older version than this build reads,
	// without figures the plan needs: re-run `danmaku calibrate`.
	CodeOldProfile = "old_profile"
	// CodeMissing: a required field is absent or zero.
	CodeMissing = "missing_field"
	// CodeRange: a field's value is outside what it may take.
	CodeRange = "out_of_range"
	// CodeInfeasible: the event cannot be planned with these figures (a
	// single room beyond one Redis shard, more load balancers than the
	// module makes, ...).
	CodeInfeasible = "infeasible"
)

// Error is a document or plan refused: a stable code, the field at fault by
// its JSON path (empty when the whole plan is at fault), and a message.
type Error struct {
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Code + ": " + e.Message
	}
	return e.Code + ": " + e.Field + ": " + e.Message
}

func fieldErr(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// decode is strictjson.Decode with its *Error carried over as ours.
func decode(data []byte, v any) error {
	err := strictjson.Decode(data, v)
	if err == nil {
		return nil
	}
	var se *strictjson.Error
	if errors.As(err, &se) {
		return &Error{Code: se.Code, Message: se.Message}
	}
	return err
}
