package rules

import (
	"errors"

	"danmaku/internal/ratelimit"
)

// Check refuses a document of one kind: nil, or a *BadDocument.
type Check func(body []byte) error

// BadDocument is a document a Check refuses, whole: a stable Code
// (bad_words, bad_rules, bad_json, bad_utf8, body_too_large) and a message
// naming the field ("line 12", "rules[2].per").
type BadDocument struct {
	Code    string
	Message string
}

func (e *BadDocument) Error() string { return "rules: " + e.Code + ": " + e.Message }

// CheckLimits checks a rate-limit rules document as every node parses it
// (ratelimit.Parse).
func CheckLimits(body []byte) error {
	_, err := ratelimit.Parse(body)
	if ce, ok := errors.AsType[*ratelimit.ConfigError](err); ok {
		return &BadDocument{Code: ce.Code, Message: ce.Message}
	}
	if err != nil {
		return &BadDocument{Code: ratelimit.CodeBadRules, Message: err.Error()}
	}
	return nil
}
