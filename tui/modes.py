"""How the app asks a question. A StrEnum: the three recorded with an attempt are the strings
practice.records.MODES stores."""
from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    PRACTICE = "practice"  # picked by hand (browse, random, a variant code): saved and scheduled
    DRILL = "drill"  # what the schedule wants next; the next question asks it again
    MOCK = "mock"  # a mock interview: a clock, no hints, the solutions on its score sheet
    INTERVIEWER = "interviewer"  # the key beside the question, for whoever asks it: nothing is saved
    WHAT_IF = "what-if"  # the what-if explorer over the variant, no attempt made: nothing is saved
    REGRADE = "regrade"  # a saved attempt shown again, regraded: nothing is saved


class FollowUps(StrEnum):
    """When the interviewer's pushes (the follow-up stages, which move parameters) are asked (a setting).
    The other stages always are; a mock interview asks every push whatever this says: it is the interview."""

    ASK = "ask"  # always asked; ctrl+k skips one
    IF_CORRECT = "if-correct"  # asked only while every answer so far is correct, as an interviewer pushes
    SKIP = "skip"  # never asked outside a mock: the solution comes straight after the last other stage


class BetweenStages(StrEnum):
    """What shows between the stages of an interview once one is graded (a setting)."""

    KEY = "key"  # each answer's verdict and its key with its why, as an interviewer corrects (mocks too)
    VERDICT_ONLY = "verdict-only"  # right or wrong only: the keys wait for the reveal, as in an exam


class MockAnswers(StrEnum):
    """What a mock interview's answers count as (a setting): the candidate is told as the mock starts."""

    PRACTICE = "practice"  # saved for the score sheet; no card is scheduled and no new question spent
    SCHEDULE = "schedule"  # each question is reviewed as the drill reviews it: rated, scheduled, new ones spent
