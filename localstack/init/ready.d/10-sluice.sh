#!/bin/bash
# LocalStack runs this once S3, SQS and DynamoDB are ready. start.sh waits
# for the ready stage to complete (/_localstack/init/ready), so tests never
# race LocalStack's start-up. Resources are provisioned per prefix by
# localstack/provision, not here: every test gets its own.
set -euo pipefail
awslocal s3api list-buckets >/dev/null
awslocal sqs list-queues >/dev/null
awslocal dynamodb list-tables >/dev/null
echo "sluice: LocalStack ready (s3, sqs, dynamodb)"
