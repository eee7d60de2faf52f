"""Countdown served as an OpenEnv environment: reach a target with + - * / and some of
the given numbers, each at most once. drmas's `remote/openenv` plays it over one
WebSocket session per episode (docs/remote-envs.md).

    python server.py --port 8000 [--max-sessions 8]

The task comes from drmas's data row (`reset(task=...)`: its `meta` holds `numbers` and
`target`), or, without one, from the seed. A step's action is `{"expression": "..."}`;
the observation's `message` is what the agent reads next; the reward is 1 for an
expression that reaches the target, else 0; the episode ends when it does or after
`attempts` tries.
"""

from __future__ import annotations

import argparse
import ast
import random
from fractions import Fraction
from typing import Any, Optional

import uvicorn
from openenv.core.env_server import Environment, create_app
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class CountdownAction(Action):
    expression: str = Field(description="an arithmetic expression, e.g. (3 + 4) * 5")


class CountdownObservation(Observation):
    message: str = ""
    numbers: list[int] = Field(default_factory=list)
    target: int = 0
    attempts_left: int = 0


class CountdownState(State):
    numbers: list[int] = Field(default_factory=list)
    target: int = 0
    solved: bool = False


def evaluate(expression: str, numbers: list[int]) -> Fraction:
    """The exact value of `expression`; ValueError names what is wrong with it."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError("not an arithmetic expression") from None
    left = list(numbers)
    ops = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__,
           ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and b == 0:
                raise ValueError("division by zero")
            return ops[type(node.op)](a, b)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if node.value not in left:
                raise ValueError(f"{node.value} is not one of the numbers left")
            left.remove(node.value)
            return Fraction(node.value)
        raise ValueError("only numbers, + - * / and parentheses are allowed")

    return value(tree.body)


class CountdownEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own instance, no shared state

    def __init__(self, attempts: int = 3):
        super().__init__()
        self.attempts = attempts
        self._state = CountdownState()
        self._left = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              task: Optional[dict[str, Any]] = None, **kwargs: Any) -> CountdownObservation:
        meta = (task or {}).get("meta", {})
        if "numbers" in meta and "target" in meta:
            numbers, target = [int(n) for n in meta["numbers"]], int(meta["target"])
        else:
            rng = random.Random(seed)
            numbers = [rng.randint(1, 10) for _ in range(3)]
            target = numbers[0] * numbers[1] + numbers[2]
        self._state = CountdownState(episode_id=episode_id, numbers=numbers, target=target)
        self._left = self.attempts
        return self._observe(f"Numbers: {', '.join(map(str, numbers))}. Target: {target}.")

    def step(self, action: CountdownAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> CountdownObservation:
        self._state.step_count += 1
        self._left -= 1
        try:
            got = evaluate(action.expression, self._state.numbers)
        except ValueError as e:
            return self._observe(f"Invalid: {e}.", reward=0.0)
        if got == self._state.target:
            self._state.solved = True
            return self._observe(f"Correct: {action.expression} = {self._state.target}.", reward=1.0)
        shown = got.numerator if got.denominator == 1 else float(got)
        return self._observe(f"{action.expression} = {shown}, not {self._state.target}.", reward=0.0)

    def _observe(self, message: str, reward: Optional[float] = None) -> CountdownObservation:
        done = self._state.solved or self._left <= 0
        if not done and reward is not None:
            message += f" {self._left} attempt(s) left."
        return CountdownObservation(message=message, numbers=self._state.numbers,
                                    target=self._state.target, attempts_left=self._left,
                                    reward=reward, done=done)

    @property
    def state(self) -> CountdownState:
        return self._state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=8)
    args = parser.parse_args()
    app = create_app(CountdownEnv, CountdownAction, CountdownObservation,
                     env_name="countdown", max_concurrent_envs=args.max_sessions)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
